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
 * RocksDB state with incremental checkpoints every interval-ms to a local
 * directory, KafkaSink EXACTLY_ONCE.
 *
 * <p>Arguments: brokers input output job-name checkpoint-dir parallelism
 * interval-ms.
 */
public final class Count {
  public static void main(String[] args) throws Exception {
    if (args.length != 7) {
      System.err.println("usage: Count brokers input output job-name checkpoint-dir parallelism interval-ms");
      System.exit(2);
    }
    String brokers = args[0], input = args[1], output = args[2], name = args[3];
    Configuration conf = new Configuration();
    conf.setString("state.backend.type", "rocksdb");
    conf.setString("execution.checkpointing.incremental", "true");
    conf.setString("execution.checkpointing.dir", "file://" + args[4]);
    conf.setString("execution.checkpointing.interval", args[6] + "ms");
    conf.setString("execution.checkpointing.mode", "EXACTLY_ONCE");
    conf.setString("taskmanager.numberOfTaskSlots", args[5]);
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(Integer.parseInt(args[5]));

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
    env.execute(name);
  }
}
