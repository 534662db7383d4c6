// Kafka's Java consumer: a classic group and a KIP-848 group of two members sharing partitions and committing;
// seek, seekToBeginning, seekToEnd, offset-out-of-range resets; pause/resume; offsetsForTimes; committed offsets
// and positions after a commit.
// Usage: ConsumerCheck BOOTSTRAP TOPIC_PREFIX REPLICATION_FACTOR
// Prints one JSON object per check ("check": group, seek, pause, commit); the Python test asserts on them.
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ConsumerCheck {
    static final ObjectMapper JSON = new ObjectMapper();
    static String bootstrap;

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        String prefix = args[1];
        short rf = Short.parseShort(args[2]);
        long base = (System.currentTimeMillis() - 3_600_000L) / 1000 * 1000;   // an hour ago, whole seconds
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
            createReady(admin, List.of(
                new NewTopic(prefix + "-classic", 4, rf), new NewTopic(prefix + "-consumer", 4, rf),
                new NewTopic(prefix + "-seek", 1, rf), new NewTopic(prefix + "-pause", 2, rf),
                new NewTopic(prefix + "-logappend", 1, rf).configs(Map.of("message.timestamp.type", "LogAppendTime"))
            ));
            long beforeAppend;
            try (KafkaProducer<String, String> p = producer()) {
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (String t : List.of("-classic", "-consumer"))
                    for (int i = 0; i < 200; i++) sent.add(p.send(new ProducerRecord<>(prefix + t, i % 4, "k-" + i, "v-" + i)));
                for (int i = 0; i < 50; i++)
                    sent.add(p.send(new ProducerRecord<>(prefix + "-seek", 0, base + i * 1000L, "k-" + i, "v-" + i)));
                for (int i = 0; i < 80; i++) sent.add(p.send(new ProducerRecord<>(prefix + "-pause", i % 2, "k-" + i, "v-" + i)));
                for (Future<RecordMetadata> f : sent) f.get();      // every record acknowledged, or fail here
                beforeAppend = System.currentTimeMillis();
                sent.clear();
                for (int i = 0; i < 5; i++)
                    sent.add(p.send(new ProducerRecord<>(prefix + "-logappend", 0, base + i, "k-" + i, "v-" + i)));
                for (Future<RecordMetadata> f : sent) f.get();
            }
            print(group(admin, prefix + "-classic", "classic"));
            print(group(admin, prefix + "-consumer", "consumer"));
            print(seek(new TopicPartition(prefix + "-seek", 0), new TopicPartition(prefix + "-logappend", 0), base, beforeAppend));
            print(pause(prefix + "-pause"));
            for (String protocol : List.of("classic", "consumer"))
                print(commit(admin, new TopicPartition(prefix + "-seek", 0), prefix + "-commit-" + protocol, protocol));
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

    static void print(Map<String, Object> m) throws Exception { System.out.println(JSON.writeValueAsString(m)); }

    static KafkaProducer<String, String> producer() {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "180000");   // generous: the machine is shared
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(Map<String, String> extra) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.putAll(extra);
        return new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer());
    }

    static List<Integer> partitions(Collection<TopicPartition> tps) {
        return tps.stream().map(TopicPartition::partition).sorted().collect(Collectors.toList());
    }

    static Map<String, Long> byPartition(Map<TopicPartition, ? extends Object> m) {
        Map<String, Long> out = new TreeMap<>();
        for (var e : m.entrySet()) {
            Object v = e.getValue();
            Long off = v == null ? null : v instanceof OffsetAndMetadata om ? om.offset()
                : v instanceof ListOffsetsResult.ListOffsetsResultInfo li ? li.offset() : (Long) v;
            out.put(Integer.toString(e.getKey().partition()), off);
        }
        return out;
    }

    static String error(Throwable e) {
        Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        return c.getClass().getName();
    }

    /** One member of a group: polls until told to commit, then commits its positions and reports. */
    static class Member implements Runnable {
        final String topic, groupId, protocol, name;
        volatile List<Integer> assignment = List.of();
        volatile Map<String, Long> positions = Map.of();
        final Set<String> seen = ConcurrentHashMap.newKeySet();
        volatile int read = 0, assignedEvents = 0, revokedEvents = 0;
        volatile boolean commitNow = false;
        final CountDownLatch committed;
        final CountDownLatch close = new CountDownLatch(1);
        final Map<String, Object> report = new ConcurrentHashMap<>();

        Member(String topic, String groupId, String protocol, String name, CountDownLatch committed) {
            this.topic = topic; this.groupId = groupId; this.protocol = protocol; this.name = name;
            this.committed = committed;
        }

        public void run() {
            Map<String, String> cfg = new HashMap<>(Map.of(ConsumerConfig.GROUP_ID_CONFIG, groupId,
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol, ConsumerConfig.CLIENT_ID_CONFIG, name,
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "20"));
            if (protocol.equals("classic")) cfg.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
            try (KafkaConsumer<String, String> c = consumer(cfg)) {
                c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> p) { if (!p.isEmpty()) revokedEvents++; }
                    public void onPartitionsAssigned(Collection<TopicPartition> p) { if (!p.isEmpty()) assignedEvents++; }
                });
                while (!commitNow) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                        read++;
                        if (!r.value().equals("v-" + Integer.parseInt(r.key().substring(2))))
                            report.put("bad_record", r.toString());
                        seen.add(r.partition() + ":" + r.offset());
                    }
                    Map<TopicPartition, Long> pos = new HashMap<>();
                    for (TopicPartition tp : c.assignment()) pos.put(tp, c.position(tp, Duration.ofSeconds(10)));
                    positions = byPartition(pos);
                    assignment = partitions(c.assignment());
                }
                c.commitSync(Duration.ofSeconds(30));
                Set<TopicPartition> mine = c.assignment();
                report.put("assignment", partitions(mine));
                report.put("committed", byPartition(c.committed(mine, Duration.ofSeconds(30))));
                Map<TopicPartition, Long> pos = new HashMap<>();
                for (TopicPartition tp : mine) pos.put(tp, c.position(tp));
                report.put("position_after_commit", byPartition(pos));
                report.put("read", read);
                report.put("assigned_events", assignedEvents);
                report.put("revoked_events", revokedEvents);
                committed.countDown();
                close.await(120, TimeUnit.SECONDS);   // both commit before either leaves (a leave rebalances)
            } catch (Throwable e) {
                report.put("error", e.toString());
                committed.countDown();
            }
        }
    }

    static Map<String, Object> group(Admin admin, String topic, String protocol) throws Exception {
        String groupId = topic + "-group";
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("check", "group");
        out.put("protocol", protocol);
        List<TopicPartition> tps = new ArrayList<>();
        for (int i = 0; i < 4; i++) tps.add(new TopicPartition(topic, i));
        Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
        for (TopicPartition tp : tps) latest.put(tp, OffsetSpec.latest());
        Map<String, Long> ends = byPartition(admin.listOffsets(latest).all().get());
        out.put("end_offsets", ends);
        CountDownLatch committed = new CountDownLatch(2);
        Member a = new Member(topic, groupId, protocol, "member-a", committed);
        Member b = new Member(topic, groupId, protocol, "member-b", committed);
        Thread ta = new Thread(a), tb = new Thread(b);
        ta.start();
        // The first member takes every partition, then the second joins and the group splits them.
        long deadline = System.currentTimeMillis() + 150000;
        while (a.assignment.size() < 4 && System.currentTimeMillis() < deadline) Thread.sleep(50);
        out.put("first_member_alone", a.assignment);
        tb.start();
        boolean stable = false;
        while (!stable && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
            List<Integer> as = a.assignment, bs = b.assignment;
            Set<Integer> union = new TreeSet<>(as);
            union.addAll(bs);
            stable = !as.isEmpty() && !bs.isEmpty() && union.size() == 4 && as.size() + bs.size() == 4;
            for (Member m : List.of(a, b))
                for (int p : m.assignment)
                    stable &= ends.get(Integer.toString(p)).equals(m.positions.get(Integer.toString(p)));
        }
        out.put("stable", stable);
        if (stable) {   // what the admin client shows of the live group
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(groupId)).describedGroups().get(groupId).get();
            Map<String, Object> desc = new LinkedHashMap<>();
            desc.put("state", d.groupState().toString());
            desc.put("type", d.type().toString());
            desc.put("assignor", d.partitionAssignor());
            desc.put("coordinator_known", d.coordinator() != null && d.coordinator().id() >= 0);
            Map<String, List<Integer>> members = new TreeMap<>();
            for (MemberDescription m : d.members()) members.put(m.clientId(), partitions(m.assignment().topicPartitions()));
            desc.put("members", members);
            out.put("described", desc);
        }
        a.commitNow = true;
        b.commitNow = true;
        committed.await(120, TimeUnit.SECONDS);
        a.close.countDown();
        b.close.countDown();
        ta.join(120000);
        tb.join(120000);
        Set<String> seen = new HashSet<>(a.seen);
        seen.addAll(b.seen);
        out.put("distinct_read", seen.size());
        out.put("members", List.of(new TreeMap<>(a.report), new TreeMap<>(b.report)));
        out.put("admin_offsets_after_close",
            byPartition(admin.listConsumerGroupOffsets(groupId).partitionsToOffsetAndMetadata().get()));
        return out;
    }

    static Map<String, Object> seek(TopicPartition tp, TopicPartition appendTp, long base, long beforeAppend) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("check", "seek");
        out.put("base", base);
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10"))) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            out.put("position_at_beginning", c.position(tp));
            c.seek(tp, 17);
            out.put("position_after_seek", c.position(tp));
            ConsumerRecords<String, String> rs = pollSome(c);
            if (!rs.isEmpty()) {
                ConsumerRecord<String, String> r = rs.iterator().next();
                out.put("first_after_seek", Map.of("offset", r.offset(), "key", r.key(), "timestamp", r.timestamp(),
                    "timestamp_type", r.timestampType().toString()));
                out.put("polled_after_seek", rs.count());
            }
            c.seekToEnd(List.of(tp));
            out.put("position_at_end", c.position(tp));
            out.put("records_after_seek_to_end", c.poll(Duration.ofMillis(500)).count());
            c.seekToBeginning(List.of(tp));
            rs = pollSome(c);
            out.put("first_after_seek_to_beginning", rs.isEmpty() ? null : rs.iterator().next().offset());
            out.put("beginning_offsets", c.beginningOffsets(List.of(tp)).get(tp));
            out.put("end_offsets", c.endOffsets(List.of(tp)).get(tp));
            Map<String, Object> times = new TreeMap<>();
            for (long delta : new long[] {-5000, 0, 2500, 3000, 49000, 49001}) {
                OffsetAndTimestamp ot = c.offsetsForTimes(Map.of(tp, base + delta)).get(tp);
                times.put(Long.toString(delta), ot == null ? null : List.of(ot.offset(), ot.timestamp() - base));
            }
            out.put("offsets_for_times", times);
            // A position past the end: reset by auto.offset.reset (earliest here).
            c.seek(tp, 1000);
            rs = pollSome(c);
            out.put("first_after_out_of_range_seek", rs.isEmpty() ? null : rs.iterator().next().offset());
        }
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "latest"))) {
            c.assign(List.of(tp));
            c.seek(tp, 1000);
            c.poll(Duration.ofMillis(1000));
            out.put("position_after_out_of_range_latest", c.position(tp));
        }
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none"))) {
            c.assign(List.of(tp));
            c.seek(tp, 1000);
            String thrown = null;
            long deadline = System.currentTimeMillis() + 60000;
            while (thrown == null && System.currentTimeMillis() < deadline) {
                try { c.poll(Duration.ofMillis(200)); } catch (Exception e) { thrown = e.getClass().getName(); }
            }
            out.put("out_of_range_with_reset_none", thrown);
            String noOffset = null;
            try (KafkaConsumer<String, String> g = consumer(Map.of(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none",
                    ConsumerConfig.GROUP_ID_CONFIG, tp.topic() + "-no-offsets"))) {
                g.assign(List.of(tp));
                try { g.poll(Duration.ofMillis(2000)); } catch (Exception e) { noOffset = e.getClass().getName(); }
            }
            out.put("no_committed_offset_with_reset_none", noOffset);
        }
        // A LogAppendTime topic: the broker's clock, not the producer's timestamps.
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            c.assign(List.of(appendTp));
            c.seekToBeginning(List.of(appendTp));
            List<Map<String, Object>> got = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60000;
            while (got.size() < 5 && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200)))
                    got.add(Map.of("type", r.timestampType().toString(), "not_before_send", r.timestamp() >= beforeAppend - 1000,
                        "not_producers", r.timestamp() != base + r.offset()));
            out.put("log_append_time_records", got);
            OffsetAndTimestamp ot = c.offsetsForTimes(Map.of(appendTp, beforeAppend - 60000)).get(appendTp);
            out.put("log_append_offset_for_time", ot == null ? null : ot.offset());
        }
        return out;
    }

    static ConsumerRecords<String, String> pollSome(KafkaConsumer<String, String> c) {
        long deadline = System.currentTimeMillis() + 60000;
        while (System.currentTimeMillis() < deadline) {
            ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(200));
            if (!rs.isEmpty()) return rs;
        }
        return ConsumerRecords.empty();
    }

    static Map<String, Object> pause(String topic) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("check", "pause");
        TopicPartition p0 = new TopicPartition(topic, 0), p1 = new TopicPartition(topic, 1);
        Map<Integer, List<Long>> offsets = new TreeMap<>(Map.of(0, new ArrayList<>(), 1, new ArrayList<>()));
        try (KafkaConsumer<String, String> c = consumer(Map.of(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5",
                ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, "200"))) {
            c.assign(List.of(p0, p1));
            c.seekToBeginning(List.of(p0, p1));
            long deadline = System.currentTimeMillis() + 90000;
            while ((offsets.get(0).isEmpty() || offsets.get(1).isEmpty()) && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) offsets.get(r.partition()).add(r.offset());
            c.pause(List.of(p0));
            out.put("paused", partitions(c.paused()));
            long p0Position = c.position(p0);
            out.put("p0_read_before_pause", offsets.get(0).size());
            int fromPaused = 0, polls = 0;
            while ((offsets.get(1).size() < 40 || polls < 5) && System.currentTimeMillis() < deadline) {
                if (offsets.get(1).size() >= 40) polls++;
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                    if (r.partition() == 0) fromPaused++;
                    offsets.get(r.partition()).add(r.offset());
                }
            }
            out.put("records_from_paused", fromPaused);
            out.put("p0_position_unchanged", c.position(p0) == p0Position);
            out.put("p1_read_while_p0_paused", offsets.get(1).size());
            c.resume(List.of(p0));
            out.put("paused_after_resume", partitions(c.paused()));
            while (offsets.get(0).size() < 40 && System.currentTimeMillis() < deadline)
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) offsets.get(r.partition()).add(r.offset());
        }
        for (int p : List.of(0, 1)) {
            List<Long> want = new ArrayList<>();
            for (long i = 0; i < 40; i++) want.add(i);
            out.put("p" + p + "_offsets_exact", offsets.get(p).equals(want));
            out.put("p" + p + "_read", offsets.get(p).size());
        }
        return out;
    }

    static Map<String, Object> commit(Admin admin, TopicPartition tp, String groupId, String protocol) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("check", "commit");
        out.put("protocol", protocol);
        Map<String, String> cfg = Map.of(ConsumerConfig.GROUP_ID_CONFIG, groupId, ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol,
            ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "7");
        try (KafkaConsumer<String, String> c = consumer(cfg)) {
            c.assign(List.of(tp));
            out.put("committed_before", c.committed(Set.of(tp)).get(tp) == null ? null : "something");
            c.commitSync(Map.of(tp, new OffsetAndMetadata(20, "meta-20")));
            OffsetAndMetadata om = c.committed(Set.of(tp)).get(tp);
            out.put("committed", om == null ? null : List.of(om.offset(), om.metadata()));
            out.put("position_from_commit", c.position(tp));
        }
        try (KafkaConsumer<String, String> c = consumer(cfg)) {
            c.assign(List.of(tp));
            out.put("new_consumer_position", c.position(tp));
            ConsumerRecords<String, String> rs = pollSome(c);
            out.put("new_consumer_first", rs.isEmpty() ? null : rs.iterator().next().offset());
            out.put("new_consumer_polled", rs.count());
            c.commitSync();
            OffsetAndMetadata om = c.committed(Set.of(tp)).get(tp);
            out.put("position_after_commit", c.position(tp));
            out.put("committed_after_commit_sync", om == null ? null : om.offset());
            out.put("committed_metadata_after_commit_sync", om == null ? null : om.metadata());
            c.commitAsync(Map.of(tp, new OffsetAndMetadata(33)), null);
            c.commitSync(Map.of(tp, new OffsetAndMetadata(34, "last")));
            om = c.committed(Set.of(tp)).get(tp);
            out.put("committed_last", om == null ? null : List.of(om.offset(), om.metadata()));
        }
        var listed = admin.listConsumerGroupOffsets(groupId).partitionsToOffsetAndMetadata().get().get(tp);
        out.put("admin_listed", listed == null ? null : List.of(listed.offset(), listed.metadata()));
        return out;
    }
}
