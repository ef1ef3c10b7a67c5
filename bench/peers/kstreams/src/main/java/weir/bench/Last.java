package weir.bench;

import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The restore benchmark's job: keeps each key's last value ("seq:padding",
 * about a kilobyte) in a RocksDB store with its changelog, and emits for
 * each input record the seq of the value it replaced, -1 for none. The
 * same job as bench/lastjob.go on weir. exactly_once_v2, commits every
 * second, no record cache.
 *
 * <p>Arguments: brokers input output application-id state-dir session-timeout-ms.
 */
public final class Last {
  public static void main(String[] args) throws Exception {
    if (args.length != 6) {
      System.err.println("usage: Last brokers input output application-id state-dir session-timeout-ms");
      System.exit(2);
    }
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 1000);
    p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    int session = Integer.parseInt(args[5]);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), session);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), Math.max(session / 3, 1));
    p.put(StreamsConfig.producerPrefix(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG), 60000);

    StreamsBuilder b = new StreamsBuilder();
    b.addStateStore(Stores.keyValueStoreBuilder(
        Stores.persistentKeyValueStore("last"), Serdes.String(), Serdes.ByteArray()));
    b.stream(args[1], Consumed.with(Serdes.String(), Serdes.ByteArray()))
        .process(() -> new Processor<String, byte[], String, String>() {
              private ProcessorContext<String, String> ctx;
              private KeyValueStore<String, byte[]> store;

              @Override
              public void init(ProcessorContext<String, String> context) {
                ctx = context;
                store = context.getStateStore("last");
              }

              @Override
              public void process(Record<String, byte[]> r) {
                byte[] old = store.get(r.key());
                long prev = old == null ? -1 : seq(old);
                store.put(r.key(), r.value());
                ctx.forward(r.withValue(Long.toString(prev)));
              }
            }, "last")
        .to(args[2], Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch done = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      done.countDown();
    }));
    // A fatal error ends the process, so that the harness sees it exit
    // rather than wait out its deadline.
    streams.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.ERROR) {
        System.err.println("kafka streams: state ERROR");
        Runtime.getRuntime().halt(1);
      }
    });
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_APPLICATION;
    });
    streams.start();
    done.await();
  }

  /** The seq of a value "seq:padding". */
  static long seq(byte[] v) {
    String s = new String(v, StandardCharsets.US_ASCII);
    return Long.parseLong(s, 0, s.indexOf(':'), 10);
  }
}
