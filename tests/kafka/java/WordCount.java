// Kafka Streams word count, as a Kafka Streams user writes it: source topic -> split into words -> group by word (a
// repartition topic) -> count() in a persistent (RocksDB) store backed by a changelog topic -> output topic
// (word -> count, a long). at_least_once, internal topics with three replicas.
//
// java -cp <kafka jars> WordCount.java <bootstrap> <application.id> <input> <output> <state.dir>
//
// Prints on stdout, one a line: "STATE <old> <new>" for each state change of the app, "STARTED" once started and
// "CLOSED" when closed (on SIGTERM). Exits 1 if the app reaches ERROR.
import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

public class WordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3], stateDir = args[4];
        String guarantee = args.length > 5 ? args[5] : StreamsConfig.AT_LEAST_ONCE;
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 3);
        p.put(StreamsConfig.topicPrefix("min.insync.replicas"), "2");
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.ACKS_CONFIG), "all");

        StreamsBuilder builder = new StreamsBuilder();
        builder.<String, String>stream(input)
            .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\W+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.as("words"))
            .count(Materialized.as("counts"))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + before + " " + now);
            System.out.flush();
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            System.out.println("CLOSED");
            System.out.flush();
        }));
        streams.start();
        System.out.println("STARTED");
        System.out.flush();
        done.await();
        if (streams.state() == KafkaStreams.State.ERROR) {
            System.exit(1);
        }
    }
}
