package weir.bench;

import java.nio.charset.StandardCharsets;
import java.util.Properties;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * The benchmark's count job: for each input record (key, decimal value), its
 * key's running count and sum as {"key":...,"count":...,"sum":...}, keyed by
 * the key. One JVM, an embedded mini cluster, parallelism = partitions,
 * checkpoints every interval-ms to a local directory, KafkaSink
 * EXACTLY_ONCE.
 *
 * <p>Arguments: brokers input output job-name checkpoint-dir parallelism
 * interval-ms. System properties:
 *
 * <ul>
 *   <li>weir.bench.state: rocksdb (the default: RocksDB state, incremental
 *       checkpoints) or hashmap (state on the heap, full checkpoints, which
 *       is all it has, and object reuse: the tuned setup for this job);
 *   <li>weir.bench.rest.port: the port of the mini cluster's REST endpoint
 *       on 127.0.0.1, where the harness reads the checkpoint statistics
 *       (/jobs/ID/checkpoints); unset, Flink picks one.
 * </ul>
 *
 * <p>The network buffers and managed memory grow with the parallelism
 * (Flink's local defaults, 64 MB of buffers and 128 MB of managed memory,
 * are too small for a keyBy between 64 subtasks), and a job that fails ten
 * times ends the process, so that the harness reports a setup that cannot
 * run instead of waiting for its output.
 */
public final class Count {
  public static void main(String[] args) throws Exception {
    if (args.length != 7) {
      System.err.println("usage: Count brokers input output job-name checkpoint-dir parallelism interval-ms");
      System.exit(2);
    }
    String brokers = args[0], input = args[1], output = args[2], name = args[3];
    int parallelism = Integer.parseInt(args[5]);
    Configuration conf = new Configuration();
    String state = System.getProperty("weir.bench.state", "rocksdb");
    switch (state) {
      case "rocksdb":
        conf.setString("state.backend.type", "rocksdb");
        conf.setString("execution.checkpointing.incremental", "true");
        break;
      case "hashmap":
        conf.setString("state.backend.type", "hashmap");
        conf.setString("execution.checkpointing.incremental", "false");
        conf.setString("pipeline.object-reuse", "true");
        break;
      default:
        System.err.println("weir.bench.state: " + state + ", want rocksdb or hashmap");
        System.exit(2);
    }
    conf.setString("execution.checkpointing.dir", "file://" + args[4]);
    conf.setString("execution.checkpointing.interval", args[6] + "ms");
    conf.setString("execution.checkpointing.mode", "EXACTLY_ONCE");
    conf.setString("taskmanager.numberOfTaskSlots", args[5]);
    // An input gate has 2 buffers per channel and 8 floating, a result
    // partition at least one per subpartition and one more: about p·(3p+9)
    // buffers of 32 KiB for the one keyBy (64: 408 MiB), more than it
    // needs at the least.
    long network = Math.max(64L << 20, (long) parallelism * (3L * parallelism + 9) * (32 << 10));
    conf.setString("taskmanager.memory.network.min", network + "b");
    conf.setString("taskmanager.memory.network.max", network + "b");
    conf.setString("taskmanager.memory.managed.size", Math.max(128L << 20, parallelism * (8L << 20)) + "b");
    conf.setString("restart-strategy.type", "fixed-delay");
    conf.setString("restart-strategy.fixed-delay.attempts", "10");
    conf.setString("restart-strategy.fixed-delay.delay", "1 s");
    conf.setString("web.checkpoints.history", "100000"); // every checkpoint of a run in /jobs/ID/checkpoints
    String rest = System.getProperty("weir.bench.rest.port");
    if (rest != null) {
      conf.setString("rest.address", "127.0.0.1");
      conf.setString("rest.bind-address", "127.0.0.1");
      conf.setString("rest.port", rest);
      conf.setString("rest.bind-port", rest);
    }
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(parallelism);

    Properties consumer = new Properties();
    consumer.setProperty("isolation.level", "read_committed");
    KafkaSource<Tuple2<String, Long>> source = KafkaSource.<Tuple2<String, Long>>builder()
        .setBootstrapServers(brokers)
        .setTopics(input)
        .setGroupId(name)
        .setStartingOffsets(OffsetsInitializer.earliest())
        .setProperties(consumer)
        .setDeserializer(new KafkaRecordDeserializationSchema<Tuple2<String, Long>>() {
          @Override
          public void deserialize(ConsumerRecord<byte[], byte[]> r, Collector<Tuple2<String, Long>> out) {
            out.collect(Tuple2.of(new String(r.key(), StandardCharsets.UTF_8),
                Long.parseLong(new String(r.value(), StandardCharsets.UTF_8))));
          }

          @Override
          public TypeInformation<Tuple2<String, Long>> getProducedType() {
            return Types.TUPLE(Types.STRING, Types.LONG);
          }
        })
        .build();

    Properties producer = new Properties();
    producer.setProperty("transaction.timeout.ms", "60000");
    KafkaSink<Tuple2<String, String>> sink = KafkaSink.<Tuple2<String, String>>builder()
        .setBootstrapServers(brokers)
        .setKafkaProducerConfig(producer)
        .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .setTransactionalIdPrefix(name)
        .setRecordSerializer((KafkaRecordSerializationSchema<Tuple2<String, String>>) (t, ctx, ts) ->
            new ProducerRecord<>(output, t.f0.getBytes(StandardCharsets.UTF_8), t.f1.getBytes(StandardCharsets.UTF_8)))
        .build();

    env.fromSource(source, WatermarkStrategy.noWatermarks(), "input")
        .keyBy(t -> t.f0)
        .process(new KeyedProcessFunction<String, Tuple2<String, Long>, Tuple2<String, String>>() {
          private transient ValueState<Long> count;
          private transient ValueState<Long> sum;

          @Override
          public void open(OpenContext ctx) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            sum = getRuntimeContext().getState(new ValueStateDescriptor<>("sum", Types.LONG));
          }

          @Override
          public void processElement(Tuple2<String, Long> r, Context ctx, Collector<Tuple2<String, String>> out) throws Exception {
            Long c = count.value(), s = sum.value();
            long nc = (c == null ? 0 : c) + 1, ns = (s == null ? 0 : s) + r.f1;
            count.update(nc);
            sum.update(ns);
            out.collect(Tuple2.of(r.f0, "{\"key\":\"" + r.f0 + "\",\"count\":" + nc + ",\"sum\":" + ns + "}"));
          }
        })
        .returns(Types.TUPLE(Types.STRING, Types.STRING))
        .sinkTo(sink);
    try {
      env.execute(name);
    } catch (Throwable e) {
      e.printStackTrace();
      System.exit(1); // the mini cluster's threads would keep the JVM up
    }
  }
}
