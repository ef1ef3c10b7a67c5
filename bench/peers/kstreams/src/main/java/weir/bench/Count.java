package weir.bench;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.internals.DefaultKafkaClientSupplier;

/**
 * The benchmark's count job: for each input record (key, decimal value), its
 * key's running count and sum as {"key":...,"count":...,"sum":...}, keyed by
 * the key. exactly_once_v2, a RocksDB store, commits every interval-ms, no record
 * cache (every update is written, as weir writes one result per record).
 *
 * <p>Arguments: brokers input output application-id state-dir threads interval-ms.
 *
 * <p>At SIGTERM, before it closes, it prints its commits to stdout as one
 * line, "weir-bench commits: completed=N failed=M durations_us=D,D,...":
 * each stream thread's commit timed from the first flush of its producer
 * (the wait for the transaction's records to be written) to
 * commitTransaction's return; failed are the transactions whose commit
 * threw or that were aborted. Kafka Streams' own commit-latency metrics
 * are an average per task of each commit (a thread's commit time divided
 * by its tasks), not a commit's time.
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

    KafkaStreams streams = new KafkaStreams(b.build(), p, new DefaultKafkaClientSupplier() {
      @Override
      public Producer<byte[], byte[]> getProducer(Map<String, Object> config) {
        return new TimedProducer(config);
      }
    });
    CountDownLatch done = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      System.out.println(COMMITS.line());
      System.out.flush();
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

  static final Commits COMMITS = new Commits();

  /** The commits of every stream thread's producer. */
  static final class Commits {
    private final List<Long> micros = new ArrayList<>();
    private long failed;

    synchronized void completed(long nanos) {
      micros.add(nanos / 1000);
    }

    synchronized void failed() {
      failed++;
    }

    synchronized String line() {
      StringBuilder b = new StringBuilder("weir-bench commits: completed=").append(micros.size())
          .append(" failed=").append(failed).append(" durations_us=");
      for (int i = 0; i < micros.size(); i++) {
        b.append(i == 0 ? "" : ",").append(micros.get(i));
      }
      return b.toString();
    }
  }

  /**
   * A stream thread's producer that times its commits. Under
   * exactly_once_v2 a thread commits by flushing its producer (once per
   * task: the first waits for the records), sending the offsets and
   * committing the transaction; the producer sees no other flushes while it
   * runs.
   */
  static final class TimedProducer extends KafkaProducer<byte[], byte[]> {
    private long flushed = -1; // System.nanoTime() of the transaction's first flush, -1 before it
    private boolean failed; // the transaction's failure is counted

    TimedProducer(Map<String, Object> config) {
      super(config, new ByteArraySerializer(), new ByteArraySerializer());
    }

    @Override
    public void beginTransaction() {
      flushed = -1;
      failed = false;
      super.beginTransaction();
    }

    @Override
    public void flush() {
      if (flushed < 0) {
        flushed = System.nanoTime();
      }
      super.flush();
    }

    @Override
    public void commitTransaction() {
      long from = flushed < 0 ? System.nanoTime() : flushed;
      try {
        super.commitTransaction();
      } catch (RuntimeException e) {
        if (!failed) {
          failed = true;
          COMMITS.failed();
        }
        throw e;
      }
      COMMITS.completed(System.nanoTime() - from);
      flushed = -1;
    }

    @Override
    public void abortTransaction() {
      if (!failed) {
        failed = true;
        COMMITS.failed();
      }
      flushed = -1;
      super.abortTransaction();
    }
  }
}
