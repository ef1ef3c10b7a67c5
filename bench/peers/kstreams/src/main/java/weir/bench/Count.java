package weir.bench;

import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The benchmark's count job: for each input record (key, decimal value), its
 * key's running count and sum as {"key":...,"count":...,"sum":...}, keyed by
 * the key. exactly_once_v2, a RocksDB store, commits every interval-ms, no record
 * cache (every update is written, as weir writes one result per record).
 *
 * <p>Arguments: brokers input output application-id state-dir threads interval-ms.
 */
public final class Count {
  public static void main(String[] args) throws Exception {
    if (args.length != 7) {
      System.err.println("usage: Count brokers input output application-id state-dir threads interval-ms");
      System.exit(2);
    }
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(args[5]));
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Integer.parseInt(args[6]));
    p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 60000);

    StreamsBuilder b = new StreamsBuilder();
    b.stream(args[1], Consumed.with(Serdes.String(), Serdes.String()))
        .groupByKey()
        .aggregate(
            () -> "0,0",
            (key, value, agg) -> {
              int comma = agg.indexOf(',');
              long count = Long.parseLong(agg, 0, comma, 10) + 1;
              long sum = Long.parseLong(agg, comma + 1, agg.length(), 10) + Long.parseLong(value);
              return count + "," + sum;
            },
            Materialized.with(Serdes.String(), Serdes.String()))
        .toStream()
        .mapValues((key, agg) -> {
          int comma = agg.indexOf(',');
          return "{\"key\":\"" + key + "\",\"count\":" + agg.substring(0, comma) + ",\"sum\":" + agg.substring(comma + 1) + "}";
        })
        .to(args[2], Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch done = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      done.countDown();
    }));
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_APPLICATION;
    });
    streams.start();
    done.await();
  }
}
