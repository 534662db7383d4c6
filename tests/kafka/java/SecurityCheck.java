// Kafka's Java clients on secured listeners: each check gets a client properties file (bootstrap.servers,
// security.protocol, sasl.*, ssl.*), as a Kafka user writes one, and every client it makes takes it whole.
// Usage: SecurityCheck CHECK...   where CHECK is KIND,NAME,PROPERTIES_FILE,TOPIC_PREFIX[,SECONDS]
//   roundtrip: the AdminClient creates a topic (3 partitions) and describes cluster, topic and configs; the idempotent
//              acks=all producer writes 300 keyed records; a classic and a KIP-848 consumer group each read them
//              all and commit; the AdminClient lists the groups' offsets and deletes the topic. Writing to a topic
//              outside TOPIC_PREFIX and describing ACLs show what the authorizer refuses this principal.
//   reauth:    the producer (acks=all) sends a record every 10 ms for SECONDS while a classic group member reads
//              them; then the clients' re-authentication metrics (KIP-368) and what was acknowledged and read.
// The checks run at once, one thread each; each prints one JSON object ("check": NAME). A check that throws prints
// its stack trace as "error".
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.FileInputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class SecurityCheck {
    static final ObjectMapper JSON = new ObjectMapper();
    static final int RECORDS = 300, PARTITIONS = 3;

    interface Call { Object call() throws Exception; }

    /** The value a call returns ("ok" for null), or the simple name of the exception it fails with. */
    static Object attempt(Call c) {
        try {
            Object v = c.call();
            return v == null ? "ok" : v;
        } catch (Throwable e) {
            return rootName(e);
        }
    }

    static String rootName(Throwable e) {
        Throwable t = e;
        while ((t instanceof ExecutionException || t instanceof CompletionException) && t.getCause() != null)
            t = t.getCause();
        return t.getClass().getSimpleName();
    }

    static synchronized void print(Map<String, Object> m) throws Exception {
        System.out.println(JSON.writeValueAsString(m));
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(args.length);
        List<Future<?>> runs = new ArrayList<>();
        for (String spec : args) {
            String[] f = spec.split(",");
            String kind = f[0], name = f[1], prefix = f[3];
            Properties props = new Properties();
            try (FileInputStream in = new FileInputStream(f[2])) { props.load(in); }
            runs.add(pool.submit(() -> {
                long t0 = System.nanoTime();
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("check", name);
                try {
                    if (kind.equals("roundtrip")) roundtrip(props, prefix, out);
                    else if (kind.equals("reauth")) reauth(props, prefix, Integer.parseInt(f[4]), out);
                    else throw new IllegalArgumentException("unknown check kind " + kind);
                } catch (Throwable e) {
                    java.io.StringWriter sw = new java.io.StringWriter();
                    e.printStackTrace(new java.io.PrintWriter(sw));
                    out.put("error", sw.toString());
                }
                out.put("ms", (System.nanoTime() - t0) / 1_000_000);
                print(out);
                return null;
            }));
        }
        for (Future<?> r : runs) r.get();
        pool.shutdown();
    }

    static Map<String, Object> with(Properties base, Object... kv) {
        Map<String, Object> m = new HashMap<>();
        for (String k : base.stringPropertyNames()) m.put(k, base.getProperty(k));
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    static Admin admin(Properties props) {
        return Admin.create(with(props, AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000"));
    }

    static KafkaProducer<String, String> producer(Properties props, Object... kv) {
        Map<String, Object> m = with(props, ProducerConfig.ACKS_CONFIG, "all",
            ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true", ProducerConfig.LINGER_MS_CONFIG, "5",
            ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        m.putAll(with(new Properties(), kv));
        return new KafkaProducer<>(m, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(Properties props, String group, String protocol) {
        Map<String, Object> m = with(props, ConsumerConfig.GROUP_ID_CONFIG, group,
            ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol, ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
            ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false", ConsumerConfig.CLIENT_ID_CONFIG, group);
        if (protocol.equals("classic")) m.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        return new KafkaConsumer<>(m, new StringDeserializer(), new StringDeserializer());
    }

    /** Until every partition answers ListOffsets on its leader (see ProducerCheck.createReady). */
    static void ready(Admin admin, String topic, int partitions) throws Exception {
        Map<TopicPartition, OffsetSpec> all = new HashMap<>();
        for (int i = 0; i < partitions; i++) all.put(new TopicPartition(topic, i), OffsetSpec.latest());
        long deadline = System.currentTimeMillis() + 60000;
        while (true) {
            try { admin.listOffsets(all).all().get(); return; } catch (ExecutionException e) {
                if (System.currentTimeMillis() > deadline) throw e;
                Thread.sleep(200);
            }
        }
    }

    @SuppressWarnings("unchecked")
    static void roundtrip(Properties props, String prefix, Map<String, Object> out) throws Exception {
        String topic = prefix + "-topic";
        try (Admin admin = admin(props)) {
            DescribeClusterResult cluster = admin.describeCluster();
            List<String> nodes = new ArrayList<>();
            for (Node n : cluster.nodes().get()) nodes.add(n.id() + "@" + n.host() + ":" + n.port());
            out.put("nodes", nodes);
            out.put("create", attempt(() -> admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1)
                .configs(Map.of("retention.ms", "7200000")))).all().get()));
            ready(admin, topic, PARTITIONS);
            out.put("described_partitions", attempt(() ->
                admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size()));
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            out.put("retention_ms", attempt(() ->
                admin.describeConfigs(List.of(res)).all().get().get(res).get("retention.ms").value()));
            out.put("listed", attempt(() -> admin.listTopics().names().get().contains(topic)));
        }

        List<String> errors = Collections.synchronizedList(new ArrayList<>());
        int[] acked = new int[1];
        try (KafkaProducer<String, String> p = producer(props)) {
            for (int i = 0; i < RECORDS; i++)
                p.send(new ProducerRecord<>(topic, "k" + i, "v" + i), (md, e) -> {
                    if (e != null) errors.add(e.getClass().getSimpleName() + ": " + e.getMessage());
                    else synchronized (acked) { acked[0]++; }
                });
            p.flush();
        }
        out.put("acked", acked[0]);
        out.put("produce_errors", errors.subList(0, Math.min(5, errors.size())));
        // A topic this principal has no ACL for: the producer learns it from Metadata.
        try (KafkaProducer<String, String> p = producer(props, ProducerConfig.MAX_BLOCK_MS_CONFIG, "15000")) {
            out.put("forbidden_produce", attempt(() -> p.send(new ProducerRecord<>("forbidden-" + prefix, "k", "v")).get()));
        }

        Map<String, Object> groups = new TreeMap<>();
        for (String protocol : List.of("classic", "consumer")) {
            String group = prefix + "-" + protocol;
            Map<String, Object> g = new LinkedHashMap<>();
            Set<String> seen = new HashSet<>();
            List<String> bad = new ArrayList<>();
            try (KafkaConsumer<String, String> c = consumer(props, group, protocol)) {
                c.subscribe(List.of(topic));
                long deadline = System.currentTimeMillis() + 90000;
                while (seen.size() < RECORDS && System.currentTimeMillis() < deadline)
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        if (!r.value().equals("v" + r.key().substring(1))) bad.add(r.toString());
                        seen.add(r.key());
                    }
                g.put("assignment", c.assignment().size());
                c.commitSync(Duration.ofSeconds(30));
            }
            g.put("distinct_read", seen.size());
            g.put("bad", bad);
            groups.put(protocol, g);
        }
        out.put("groups", groups);

        try (Admin admin = admin(props)) {
            Map<String, Object> committed = new TreeMap<>();
            for (String protocol : List.of("classic", "consumer")) {
                String group = prefix + "-" + protocol;
                committed.put(protocol, attempt(() -> {
                    long sum = 0;
                    for (OffsetAndMetadata om : admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().values())
                        sum += om.offset();
                    return sum;
                }));
                ((Map<String, Object>) groups.get(protocol)).put("state_after_close", attempt(() ->
                    admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get().groupState().toString()));
            }
            out.put("committed_offsets_sum", committed);
            out.put("describe_acls", attempt(() -> admin.describeAcls(AclBindingFilter.ANY).values().get().size()));
            out.put("delete", attempt(() -> admin.deleteTopics(List.of(topic)).all().get()));
        }
    }

    static void reauth(Properties props, String prefix, int seconds, Map<String, Object> out) throws Exception {
        String topic = prefix + "-topic";
        try (Admin admin = admin(props)) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
            ready(admin, topic, 2);
        }
        List<String> errors = Collections.synchronizedList(new ArrayList<>());
        Set<String> read = ConcurrentHashMap.newKeySet();
        List<String> consumerErrors = Collections.synchronizedList(new ArrayList<>());
        int[] acked = new int[1];
        int sent = 0;
        java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        Map<String, Object> consumerMetrics = new TreeMap<>();
        Thread reader = new Thread(() -> {
            try (KafkaConsumer<String, String> c = consumer(props, prefix + "-group", "classic")) {
                c.subscribe(List.of(topic));
                while (!stop.get())
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) read.add(r.value());
                consumerMetrics.putAll(authMetrics(c.metrics()));
            } catch (Throwable e) {
                consumerErrors.add(e.toString());
            }
        });
        reader.start();
        Map<String, Object> producerMetrics;
        long start = System.currentTimeMillis();
        try (KafkaProducer<String, String> p = producer(props, ProducerConfig.LINGER_MS_CONFIG, "0")) {
            while (System.currentTimeMillis() - start < seconds * 1000L) {
                p.send(new ProducerRecord<>(topic, "k" + sent, "v" + sent), (md, e) -> {
                    if (e != null) errors.add(e.getClass().getSimpleName() + ": " + e.getMessage());
                    else synchronized (acked) { acked[0]++; }
                });
                sent++;
                Thread.sleep(10);
            }
            p.flush();
            producerMetrics = authMetrics(p.metrics());
        }
        out.put("produced_for_ms", System.currentTimeMillis() - start);
        long deadline = System.currentTimeMillis() + 30000;
        while (read.size() < acked[0] && System.currentTimeMillis() < deadline) Thread.sleep(100);
        stop.set(true);
        reader.join(60000);
        out.put("sent", sent);
        out.put("acked", acked[0]);
        out.put("produce_errors", errors.subList(0, Math.min(5, errors.size())));
        out.put("distinct_read", read.size());
        out.put("consumer_errors", consumerErrors);
        out.put("producer_metrics", producerMetrics);
        out.put("consumer_metrics", consumerMetrics);
    }

    /** The clients' (re-)authentication and connection counters, summed over the metric groups that carry them. */
    static Map<String, Object> authMetrics(Map<MetricName, ? extends Metric> metrics) {
        Map<String, Object> m = new TreeMap<>();
        for (var e : metrics.entrySet()) {
            String name = e.getKey().name();
            if (!e.getKey().tags().containsKey("node-id") && (name.endsWith("authentication-total")
                    || name.equals("connection-close-total") || name.equals("connection-creation-total"))) {
                Object v = e.getValue().metricValue();
                if (v instanceof Double d) m.merge(name, d.longValue(), (a, b) -> (Long) a + (Long) b);
            }
        }
        return m;
    }
}
