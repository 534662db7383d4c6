// Kafka's Java producer (idempotent, acks=all) with each compression codec, read back with the Java consumer.
// Usage: ProducerCheck BOOTSTRAP TOPIC_PREFIX REPLICATION_FACTOR RECORDS_PER_CODEC
// Prints one JSON object per codec: what was acknowledged (offsets per partition) and what the consumer read back,
// compared record by record (offset, key, value, headers, timestamp) in Java; the Python test asserts on them.
// Then one {"codec": "transactions"} object: a transactional producer (with the broker's finalized
// transaction.version, 2 on Kafka 4 and Strata: an epoch bump per transaction, partitions and offsets added by the
// brokers) commits and aborts transactions with sendOffsetsToTransaction; what read_committed and read_uncommitted
// consumers read, the group's committed offsets, and the producer epoch each partition's leader reports.
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ProducerCheck {
    static final ObjectMapper JSON = new ObjectMapper();
    static final int PARTITIONS = 3;

    record Sent(int index, byte[] key, byte[] value, List<Header> headers, int partition, long offset, long timestamp) {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1];
        short rf = Short.parseShort(args[2]);
        int n = Integer.parseInt(args[3]);
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            List<NewTopic> topics = new ArrayList<>();
            for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd"))
                topics.add(new NewTopic(prefix + "-" + codec, PARTITIONS, rf));
            createReady(admin, topics);
        }
        for (String codec : List.of("none", "gzip", "snappy", "lz4", "zstd"))
            System.out.println(JSON.writeValueAsString(check(bootstrap, prefix + "-" + codec, codec, n)));
        System.out.println(JSON.writeValueAsString(transactions(bootstrap, prefix + "-txn", rf)));
        // The bytes each codec's topic takes in the log (largest replica of each partition), as describeLogDirs
        // reports them: compression must show.
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            List<Integer> ids = new ArrayList<>();
            for (var node : admin.describeCluster().nodes().get()) ids.add(node.id());
            Map<TopicPartition, Long> sizes = new HashMap<>();
            for (var broker : admin.describeLogDirs(ids).allDescriptions().get().values())
                for (var dir : broker.values())
                    for (var r : dir.replicaInfos().entrySet())
                        if (r.getKey().topic().startsWith(prefix + "-"))
                            sizes.merge(r.getKey(), r.getValue().size(), Math::max);
            Map<String, Long> perCodec = new TreeMap<>();
            for (var e : sizes.entrySet())
                perCodec.merge(e.getKey().topic().substring(prefix.length() + 1), e.getValue(), Long::sum);
            System.out.println(JSON.writeValueAsString(Map.of("codec", "*", "log_bytes", perCodec)));
        }
    }

    /** Creates the topics (one a retried request created already counts: the names are this run's own), then
     * waits until every partition answers ListOffsets on its leader: a broker serves a new partition a moment after
     * the metadata names its leader, and producing into that moment sends Apache Kafka's idempotent producer into
     * OutOfOrderSequence retries on a loaded machine. */
    static void createReady(Admin admin, List<NewTopic> topics) throws Exception {
        for (var f : admin.createTopics(topics).values().values()) {
            try { f.get(); } catch (ExecutionException e) {
                if (!(e.getCause() instanceof org.apache.kafka.common.errors.TopicExistsException)) throw e;
            }
        }
        Map<TopicPartition, OffsetSpec> all = new HashMap<>();
        for (NewTopic t : topics)
            for (int i = 0; i < t.numPartitions(); i++) all.put(new TopicPartition(t.name(), i), OffsetSpec.latest());
        long deadline = System.currentTimeMillis() + 120000;
        while (true) {
            try { admin.listOffsets(all).all().get(); return; } catch (ExecutionException e) {
                if (System.currentTimeMillis() > deadline) throw e;
                Thread.sleep(200);
            }
        }
    }

    static byte[] bytes(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    static Map<String, Object> check(String bootstrap, String topic, String codec, int n) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "16384");
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "180000");   // generous: the machine is shared
        Map<Integer, Sent> acked = new ConcurrentHashMap<>();
        List<String> errors = Collections.synchronizedList(new ArrayList<>());
        Random rnd = new Random(codec.hashCode());
        long t0 = System.currentTimeMillis();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < n; i++) {
                final int idx = i;
                // Keys pick the partition (murmur2) except every 10th record: no key, an explicit partition.
                byte[] key = i % 10 == 9 ? null : bytes("key-" + (i % 97));
                Integer partition = i % 10 == 9 ? i % PARTITIONS : null;
                byte[] value;
                if (i % 50 == 7) value = null;                       // a null value
                else if (i % 50 == 8) value = new byte[0];           // an empty one
                else {                                               // compressible text, then random bytes
                    StringBuilder sb = new StringBuilder("value-" + i + "-");
                    for (int j = 0; j < rnd.nextInt(40); j++) sb.append("abcdefgh");
                    byte[] text = bytes(sb.toString());
                    byte[] noise = new byte[rnd.nextInt(64)];
                    rnd.nextBytes(noise);
                    value = new byte[text.length + noise.length];
                    System.arraycopy(text, 0, value, 0, text.length);
                    System.arraycopy(noise, 0, value, text.length, noise.length);
                }
                List<Header> headers = new ArrayList<>();
                headers.add(new RecordHeader("seq", bytes(Integer.toString(i))));
                if (i % 3 == 0) headers.add(new RecordHeader("null-header", null));
                if (i % 5 == 0) headers.add(new RecordHeader("seq", bytes("dup-" + i)));   // repeated header key
                ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic, partition, null, key, value, headers);
                final byte[] fkey = key, fvalue = value;
                producer.send(r, (md, e) -> {
                    if (e != null) errors.add(e.getClass().getName() + ": " + e.getMessage());
                    else acked.put(idx, new Sent(idx, fkey, fvalue, headers, md.partition(), md.offset(), md.timestamp()));
                });
            }
            producer.flush();
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("codec", codec);
        out.put("topic", topic);
        out.put("sent", n);
        out.put("acked", acked.size());
        out.put("errors", errors.subList(0, Math.min(5, errors.size())));
        // Per partition: the acknowledged offsets in send order must be 0, 1, 2... (contiguous, in order).
        Map<Integer, List<Sent>> byPartition = new TreeMap<>();
        for (int i = 0; i < n; i++) if (acked.containsKey(i))
            byPartition.computeIfAbsent(acked.get(i).partition(), k -> new ArrayList<>()).add(acked.get(i));
        Map<String, Integer> counts = new TreeMap<>();
        List<String> orderProblems = new ArrayList<>();
        for (var e : byPartition.entrySet()) {
            counts.put(Integer.toString(e.getKey()), e.getValue().size());
            for (int j = 0; j < e.getValue().size(); j++)
                if (e.getValue().get(j).offset() != j)
                    orderProblems.add("partition " + e.getKey() + " send #" + j + " got offset " + e.getValue().get(j).offset());
        }
        out.put("acked_per_partition", counts);
        out.put("offset_problems", orderProblems.subList(0, Math.min(5, orderProblems.size())));

        // Read everything back with the Java consumer (no group: assign and seek to the beginning).
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "65536");   // several fetches per partition
        Map<Integer, List<ConsumerRecord<byte[], byte[]>>> read = new TreeMap<>();
        int total = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < PARTITIONS; i++) tps.add(new TopicPartition(topic, i));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 120000;
            while (total < acked.size() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    read.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r);
                    total++;
                }
            }
            // Nothing beyond what was acknowledged.
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(300))) {
                read.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r);
                total++;
            }
            Map<String, Long> ends = new TreeMap<>();
            for (var e : consumer.endOffsets(tps).entrySet()) ends.put(Integer.toString(e.getKey().partition()), e.getValue());
            out.put("end_offsets", ends);
        }
        out.put("read", total);
        List<String> mismatches = new ArrayList<>();
        for (var e : byPartition.entrySet()) {
            List<ConsumerRecord<byte[], byte[]>> got = read.getOrDefault(e.getKey(), List.of());
            if (got.size() != e.getValue().size())
                mismatches.add("partition " + e.getKey() + ": read " + got.size() + " of " + e.getValue().size());
            for (int j = 0; j < Math.min(got.size(), e.getValue().size()); j++) {
                Sent s = e.getValue().get(j);
                ConsumerRecord<byte[], byte[]> r = got.get(j);
                String where = "partition " + e.getKey() + " #" + j + " (send " + s.index() + "): ";
                if (r.offset() != s.offset()) mismatches.add(where + "offset " + r.offset() + " != " + s.offset());
                if (!Arrays.equals(r.key(), s.key())) mismatches.add(where + "key differs");
                if (!Arrays.equals(r.value(), s.value())) mismatches.add(where + "value differs");
                if (r.timestamp() != s.timestamp()) mismatches.add(where + "timestamp " + r.timestamp() + " != " + s.timestamp());
                if (r.timestampType() != org.apache.kafka.common.record.TimestampType.CREATE_TIME)
                    mismatches.add(where + "timestamp type " + r.timestampType());
                if (r.timestamp() < t0 - 1000) mismatches.add(where + "timestamp before the send");
                List<String> want = new ArrayList<>(), have = new ArrayList<>();
                for (Header h : s.headers()) want.add(h.key() + "=" + (h.value() == null ? "null" : new String(h.value(), StandardCharsets.UTF_8)));
                for (Header h : r.headers()) have.add(h.key() + "=" + (h.value() == null ? "null" : new String(h.value(), StandardCharsets.UTF_8)));
                if (!want.equals(have)) mismatches.add(where + "headers " + have + " != " + want);
            }
        }
        for (var e : read.keySet()) if (!byPartition.containsKey(e)) mismatches.add("records read from partition " + e + " that got none");
        out.put("mismatches", mismatches.subList(0, Math.min(10, mismatches.size())));
        out.put("mismatch_count", mismatches.size());
        return out;
    }

    /** Six transactions of 30 records over three partitions, commit and abort in turn, each also committing the
     * group's offset 100 + i on partition 0 with sendOffsetsToTransaction. */
    static Map<String, Object> transactions(String bootstrap, String topic, short rf) throws Exception {
        Map<String, Object> out = new TreeMap<>();
        out.put("codec", "transactions");
        String group = topic + "-group";
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            createReady(admin, List.of(new NewTopic(topic, PARTITIONS, rf)));
            var features = admin.describeFeatures().featureMetadata().get().finalizedFeatures().get("transaction.version");
            out.put("transaction_version", features == null ? 0 : (int) features.maxVersionLevel());
        }
        Map<String, Object> p = new HashMap<>();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, topic + "-tid");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        int committed = 0, sent = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            producer.initTransactions();
            for (int t = 0; t < 6; t++) {
                producer.beginTransaction();
                for (int i = 0; i < 30; i++) {
                    producer.send(new ProducerRecord<>(topic, i % PARTITIONS, null, bytes("t" + t + "-" + i)));
                    sent++;
                }
                producer.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(100 + t)),
                                                  new ConsumerGroupMetadata(group));
                if (t % 2 == 0) { producer.commitTransaction(); committed += 30; }
                else { producer.flush(); producer.abortTransaction(); }   // else unsent records are dropped
            }
        }
        out.put("sent", sent);
        out.put("committed", committed);
        // commitTransaction returns once the coordinator has logged PrepareCommit; the markers follow. Wait for the
        // transaction to be complete, as a reader expecting its records must.
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            long deadline = System.currentTimeMillis() + 30000;
            String state = "";
            while (System.currentTimeMillis() < deadline) {
                state = admin.describeTransactions(List.of(topic + "-tid")).description(topic + "-tid").get().state().toString();
                if (state.startsWith("Complete")) break;   // TransactionState.toString: "CompleteCommit"
                Thread.sleep(100);
            }
            out.put("final_state", state);
        }
        for (String isolation : List.of("read_committed", "read_uncommitted")) {
            Map<String, Object> c = new HashMap<>();
            c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
            List<String> values = new ArrayList<>();
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                List<TopicPartition> tps = new ArrayList<>();
                for (int i = 0; i < PARTITIONS; i++) tps.add(new TopicPartition(topic, i));
                consumer.assign(tps);
                consumer.seekToBeginning(tps);
                Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
                long deadline = System.currentTimeMillis() + 30000;
                while (System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(300)))
                        values.add(new String(r.value(), StandardCharsets.UTF_8));
                    boolean done = true;
                    for (TopicPartition tp : tps) done &= consumer.position(tp) >= ends.get(tp);
                    if (done) break;
                }
            }
            Set<String> transactions = new TreeSet<>();
            for (String v : values) transactions.add(v.substring(0, v.indexOf('-')));
            out.put(isolation, Map.of("records", values.size(), "distinct", new HashSet<>(values).size(),
                                      "transactions", new ArrayList<>(transactions)));
        }
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            var offsets = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            out.put("group_offset", offsets.get(new TopicPartition(topic, 0)).offset());
            List<Integer> epochs = new ArrayList<>();
            for (int i = 0; i < PARTITIONS; i++) {
                var state = admin.describeProducers(List.of(new TopicPartition(topic, i))).all().get()
                        .get(new TopicPartition(topic, i));
                for (var ps : state.activeProducers()) epochs.add(ps.producerEpoch());
            }
            out.put("producer_epochs", epochs);
        }
        return out;
    }
}
