// Kafka's Java AdminClient: every admin API a broker serves, as a user calls them, with the answers (values,
// config sources, exception classes) printed one JSON object per check for the Python test to assert on.
// Usage: AdminCheck BOOTSTRAP PREFIX
// The replication factor is min(3, brokers); with three brokers, electLeaders and partition reassignments move
// leadership and replicas for real.
import com.fasterxml.jackson.databind.ObjectMapper;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.ExecutionException;
import java.util.function.Supplier;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class AdminCheck {
    static final ObjectMapper JSON = new ObjectMapper();
    static String bootstrap, prefix;
    static Admin admin;
    static List<Integer> ids;
    static short rf;
    static long base = (System.currentTimeMillis() - 600_000L) / 1000 * 1000;

    interface Call { Object call() throws Exception; }

    /** The value a call returns, or the simple name of the exception it fails with. */
    static Object attempt(Call c) {
        try {
            Object v = c.call();
            return v == null ? "ok" : v;
        } catch (Throwable e) {
            Throwable t = e;
            while ((t instanceof ExecutionException || t instanceof java.util.concurrent.CompletionException)
                   && t.getCause() != null) t = t.getCause();
            return t.getClass().getSimpleName();
        }
    }

    static void print(String check, Map<String, Object> m) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("check", check);
        out.putAll(m);
        System.out.println(JSON.writeValueAsString(out));
    }

    /** Runs a check; an unexpected exception is reported as the check's "error" instead of ending the program. */
    static void run(String check, Call body) throws Exception {
        long t0 = System.nanoTime();
        Map<String, Object> m;
        try {
            @SuppressWarnings("unchecked") Map<String, Object> r = (Map<String, Object>) body.call();
            m = r;
        } catch (Throwable e) {
            java.io.StringWriter sw = new java.io.StringWriter();
            e.printStackTrace(new java.io.PrintWriter(sw));
            m = Map.of("error", sw.toString());
        }
        m = new LinkedHashMap<>(m);
        m.put("ms", (System.nanoTime() - t0) / 1_000_000);
        print(check, m);
    }

    static String t(String name) { return prefix + "-" + name; }
    static TopicPartition tp(String topic, int p) { return new TopicPartition(topic, p); }

    interface Pred { boolean test(Object v) throws Exception; }

    /** `get` until its value passes `ok`, at most 60 s; the value (or the exception's name) it last gave. What a
     * check reports is what it waited on: brokers apply metadata with a lag, so two calls in a row may be answered
     * by brokers that do not agree yet (on Apache Kafka as on Strata). */
    static Object settle(Call get, Pred ok) throws Exception {
        long deadline = System.currentTimeMillis() + 60000;
        while (true) {
            Object v;
            try { v = get.call(); if (ok.test(v)) return v; } catch (Exception e) { v = attempt(() -> { throw e; }); }
            if (System.currentTimeMillis() > deadline) return v;
            Thread.sleep(200);
        }
    }

    @SuppressWarnings("unchecked")
    static Object val(Object configsView, String name) {
        Object e = ((Map<String, Object>) configsView).get(name);
        return e == null ? null : ((Map<String, Object>) e).get("value");
    }

    static void waitFor(String what, Call cond) throws Exception {
        long deadline = System.currentTimeMillis() + 60000;
        while (System.currentTimeMillis() < deadline) {
            try { if (Boolean.TRUE.equals(cond.call())) return; } catch (Exception ignored) {}
            Thread.sleep(200);
        }
        throw new AssertionError("timed out waiting for " + what);
    }

    static Map<String, Object> partitionView(TopicPartitionInfo p) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("partition", p.partition());
        m.put("leader", p.leader() == null ? null : p.leader().id());
        m.put("replicas", p.replicas().stream().map(Node::id).collect(Collectors.toList()));
        m.put("isr", p.isr().stream().map(Node::id).sorted().collect(Collectors.toList()));
        return m;
    }

    static TopicDescription describe(String topic) throws Exception {
        return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
    }

    /** Until every partition of `topic` has a leader and a full ISR (brokers apply metadata with a lag). */
    static TopicDescription settled(String topic, int partitions) throws Exception {
        TopicDescription[] seen = new TopicDescription[1];
        waitFor(topic + " settled", () -> {
            TopicDescription d = describe(topic);
            seen[0] = d;
            return d.partitions().size() == partitions && d.partitions().stream()
                .allMatch(p -> p.leader() != null && p.isr().size() == p.replicas().size());
        });
        return seen[0];
    }

    static Map<String, Object> configView(ConfigEntry e) {
        Map<String, Object> m = new LinkedHashMap<>();
        if (e == null) return m;
        m.put("value", e.value());
        m.put("source", e.source().toString());
        m.put("read_only", e.isReadOnly());
        m.put("sensitive", e.isSensitive());
        return m;
    }

    static Config configs(ConfigResource r) throws Exception {
        return admin.describeConfigs(List.of(r)).all().get().get(r);
    }

    static String valueOf(ConfigResource r, String name) throws Exception {
        ConfigEntry e = configs(r).get(name);
        return e == null ? null : e.value();
    }

    static Map<String, Object> configsOf(ConfigResource r, String... names) throws Exception {
        Config c = configs(r);
        Map<String, Object> out = new LinkedHashMap<>();
        for (String n : names) out.put(n, configView(c.get(n)));
        return out;
    }

    static Object alter(ConfigResource r, boolean validateOnly, AlterConfigOp... ops) {
        return attempt(() -> admin.incrementalAlterConfigs(Map.of(r, List.of(ops)),
            new AlterConfigsOptions().validateOnly(validateOnly)).all().get());
    }

    static AlterConfigOp op(String name, String value, AlterConfigOp.OpType type) {
        return new AlterConfigOp(new ConfigEntry(name, value), type);
    }

    static void produce(String topic, int partition, int n, Long[] timestamps) throws Exception {
        // The leader serves the new partition (see ProducerCheck.createReady).
        waitFor(topic + " served", () -> admin.listOffsets(Map.of(tp(topic, partition), OffsetSpec.latest())).all().get() != null);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        try (KafkaProducer<String, String> pr = new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < n; i++) {
                pr.send(new ProducerRecord<>(topic, partition, timestamps == null ? null : timestamps[i], "k" + i, "v" + i)).get();
            }
        }
    }

    static KafkaConsumer<String, String> consumer(Map<String, String> extra) {
        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.putAll(extra);
        return new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer());
    }

    /** Polls until `n` partitions are assigned, then looks up every position (so a commit covers them all). */
    static void pollUntilAssigned(KafkaConsumer<String, String> c, int n) {
        long deadline = System.currentTimeMillis() + 90000;
        while (c.assignment().size() < n && System.currentTimeMillis() < deadline) c.poll(Duration.ofMillis(100));
        for (TopicPartition p : c.assignment()) c.position(p, Duration.ofSeconds(30));
    }

    static List<Integer> parts(Collection<TopicPartition> tps) {
        return tps.stream().map(TopicPartition::partition).sorted().collect(Collectors.toList());
    }

    static Map<String, Object> groupView(String group) {
        Object r = attempt(() -> admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get());
        if (!(r instanceof ConsumerGroupDescription d)) return Map.of("error", r);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("state", d.groupState().toString());
        m.put("type", d.type().toString());
        m.put("assignor", d.partitionAssignor());
        m.put("simple", d.isSimpleConsumerGroup());
        m.put("coordinator_known", d.coordinator() != null && ids.contains(d.coordinator().id()));
        List<Map<String, Object>> members = new ArrayList<>();
        for (MemberDescription md : d.members()) {
            Map<String, Object> mm = new LinkedHashMap<>();
            mm.put("client_id", md.clientId());
            mm.put("instance_id", md.groupInstanceId().orElse(null));
            mm.put("host_set", md.host() != null && !md.host().isEmpty());
            mm.put("assignment", parts(md.assignment().topicPartitions()));
            mm.put("target_assignment", md.targetAssignment().map(a -> parts(a.topicPartitions())).orElse(null));
            mm.put("epoch_positive", md.memberEpoch().map(e -> e > 0).orElse(null));
            members.add(mm);
        }
        m.put("members", members);
        return m;
    }

    static Map<String, Object> offsetsView(String group) {
        Object r = attempt(() -> admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get());
        if (!(r instanceof Map<?, ?> offsets)) return Map.of("error", r);
        Map<String, Object> m = new TreeMap<>();
        for (var e : offsets.entrySet()) {
            TopicPartition k = (TopicPartition) e.getKey();
            OffsetAndMetadata v = (OffsetAndMetadata) e.getValue();
            m.put(k.topic().substring(prefix.length() + 1) + "-" + k.partition(), v == null ? null : List.of(v.offset(), v.metadata()));
        }
        return m;
    }

    static Map<String, Object> listedGroups(String... groups) throws Exception {
        Map<String, Object> m = new TreeMap<>();
        Set<String> wanted = Set.of(groups);
        @SuppressWarnings("deprecation")
        Collection<ConsumerGroupListing> all = admin.listConsumerGroups().all().get();
        for (ConsumerGroupListing g : all)
            if (wanted.contains(g.groupId()))
                m.put(g.groupId().substring(prefix.length() + 1), List.of(g.groupState().map(Object::toString).orElse("?"),
                    g.type().map(Object::toString).orElse("?")));
        return m;
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        prefix = args[1];
        try (Admin a = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000"))) {
            admin = a;
            ids = admin.describeCluster().nodes().get().stream().map(Node::id).sorted().collect(Collectors.toList());
            rf = (short) Math.min(3, ids.size());
            run("cluster", AdminCheck::cluster);
            run("create_topics", AdminCheck::createTopics);
            run("describe_topics", AdminCheck::describeTopics);
            run("topic_configs", AdminCheck::topicConfigs);
            run("broker_configs", AdminCheck::brokerConfigs);
            run("create_partitions", AdminCheck::createPartitions);
            run("groups", AdminCheck::groups);
            run("list_topics", AdminCheck::listTopics);
            run("delete_records", AdminCheck::deleteRecords);
            run("list_offsets", AdminCheck::listOffsets);
            run("log_dirs", AdminCheck::logDirs);
            run("elect_leaders", AdminCheck::electLeaders);
            run("reassignments", AdminCheck::reassignments);
            run("delete_topics", AdminCheck::deleteTopics);
        }
    }

    static Map<String, Object> cluster() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        DescribeClusterResult c = admin.describeCluster();
        m.put("nodes", ids);
        Node controller = c.controller().get();
        m.put("controller_in_nodes", controller != null && ids.contains(controller.id()));
        m.put("cluster_id_set", c.clusterId().get() != null && !c.clusterId().get().isEmpty());
        m.put("hosts", c.nodes().get().stream().map(Node::host).distinct().collect(Collectors.toList()));
        m.put("racks_set", c.nodes().get().stream().map(Node::hasRack).distinct().collect(Collectors.toList()));
        m.put("with_fenced", attempt(() -> admin.describeCluster(new DescribeClusterOptions().includeFencedBrokers(true))
            .nodes().get().stream().map(n -> n.id() + (n.isFenced() ? " fenced" : "")).sorted().collect(Collectors.toList())));
        Object f = attempt(() -> admin.describeFeatures().featureMetadata().get());
        if (f instanceof FeatureMetadata fm) {
            m.put("finalized_features", new TreeSet<>(fm.finalizedFeatures().keySet()));
            m.put("supported_features", new TreeSet<>(fm.supportedFeatures().keySet()));
        } else m.put("features", f);
        Object q = attempt(() -> admin.describeMetadataQuorum().quorumInfo().get());
        if (q instanceof QuorumInfo qi) {
            m.put("quorum_leader_in_nodes", ids.contains(qi.leaderId()));
            m.put("quorum_voters", qi.voters().size());
            m.put("quorum_voters_and_observers", qi.voters().size() + qi.observers().size());
            m.put("quorum_high_watermark_positive", qi.highWatermark() > 0);
            m.put("quorum_leader_epoch_positive", qi.leaderEpoch() > 0);
            m.put("quorum_leader_is_voter", qi.voters().stream().anyMatch(v -> v.replicaId() == qi.leaderId()));
        } else m.put("quorum", q);
        return m;
    }

    static Map<String, Object> createTopics() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        CreateTopicsResult r = admin.createTopics(List.of(
            new NewTopic(t("a"), 3, rf).configs(Map.of("retention.ms", "123456", "cleanup.policy", "compact"))));
        m.put("create", attempt(() -> r.all().get()));
        m.put("result_partitions", attempt(() -> r.numPartitions(t("a")).get()));
        m.put("result_replication_factor", attempt(() -> r.replicationFactor(t("a")).get()));
        m.put("result_topic_id_set", attempt(() -> !r.topicId(t("a")).get().equals(Uuid.ZERO_UUID)));
        m.put("result_retention", attempt(() -> configView(r.config(t("a")).get().get("retention.ms"))));
        m.put("result_segment_bytes", attempt(() -> configView(r.config(t("a")).get().get("segment.bytes"))));

        CreateTopicsResult v = admin.createTopics(List.of(new NewTopic(t("b"), 2, rf)), new CreateTopicsOptions().validateOnly(true));
        m.put("validate_only", attempt(() -> v.all().get()));
        m.put("validate_only_partitions", attempt(() -> v.numPartitions(t("b")).get()));
        m.put("validate_only_created", admin.listTopics().names().get().contains(t("b")));

        CreateTopicsResult d = admin.createTopics(List.of(new NewTopic(t("default"), Optional.empty(), Optional.empty())));
        m.put("defaults", attempt(() -> List.of(d.numPartitions(t("default")).get(), d.replicationFactor(t("default")).get())));

        // Explicit assignments: partition i on the brokers rotated by i; the first is the preferred leader.
        Map<Integer, List<Integer>> assignment = new HashMap<>();
        for (int i = 0; i < 3; i++) {
            List<Integer> rs = new ArrayList<>();
            for (int j = 0; j < rf; j++) rs.add(ids.get((i + j) % ids.size()));
            assignment.put(i, rs);
        }
        m.put("assignment_asked", assignment);
        m.put("assigned", attempt(() -> admin.createTopics(List.of(new NewTopic(t("assigned"), assignment))).all().get()));
        m.put("assigned_described", attempt(() -> settled(t("assigned"), 3).partitions().stream()
            .map(AdminCheck::partitionView).collect(Collectors.toList())));

        Map<String, Object> errors = new LinkedHashMap<>();
        errors.put("exists", attempt(() -> admin.createTopics(List.of(new NewTopic(t("a"), 1, rf))).all().get()));
        errors.put("replication_factor_too_big", attempt(() ->
            admin.createTopics(List.of(new NewTopic(t("big-rf"), 1, (short) (ids.size() + 1)))).all().get()));
        errors.put("zero_partitions", attempt(() -> admin.createTopics(List.of(new NewTopic(t("zero"), 0, rf))).all().get()));
        errors.put("zero_replication_factor", attempt(() ->
            admin.createTopics(List.of(new NewTopic(t("zero-rf"), 1, (short) 0))).all().get()));
        errors.put("bad_config_value", attempt(() -> admin.createTopics(List.of(
            new NewTopic(t("bad-value"), 1, rf).configs(Map.of("retention.ms", "soon")))).all().get()));
        errors.put("unknown_config", attempt(() -> admin.createTopics(List.of(
            new NewTopic(t("unknown-config"), 1, rf).configs(Map.of("no.such.config", "1")))).all().get()));
        errors.put("bad_name", attempt(() -> admin.createTopics(List.of(new NewTopic("bad name!", 1, rf))).all().get()));
        errors.put("long_name", attempt(() -> admin.createTopics(List.of(new NewTopic("x".repeat(250), 1, rf))).all().get()));
        errors.put("unknown_broker_in_assignment", attempt(() -> admin.createTopics(List.of(
            new NewTopic(t("nobroker"), Map.of(0, List.of(99))))).all().get()));
        errors.put("duplicate_replica_in_assignment", attempt(() -> admin.createTopics(List.of(
            new NewTopic(t("dup"), Map.of(0, List.of(ids.get(0), ids.get(0)))))).all().get()));
        errors.put("validate_only_exists", attempt(() -> admin.createTopics(List.of(new NewTopic(t("a"), 1, rf)),
            new CreateTopicsOptions().validateOnly(true)).all().get()));
        m.put("errors", errors);
        Set<String> names = admin.listTopics().names().get();
        m.put("failed_ones_absent", names.stream().noneMatch(n -> n.startsWith(t("big-rf")) || n.equals(t("zero"))
            || n.equals(t("bad-value")) || n.equals(t("unknown-config")) || n.equals(t("nobroker")) || n.equals(t("dup"))));
        return m;
    }

    static Map<String, Object> describeTopics() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        TopicDescription d = settled(t("a"), 3);
        m.put("name", d.name().equals(t("a")));
        m.put("internal", d.isInternal());
        m.put("partitions", d.partitions().stream().map(AdminCheck::partitionView).collect(Collectors.toList()));
        m.put("by_id", attempt(() -> admin.describeTopics(TopicCollection.ofTopicIds(List.of(d.topicId())))
            .allTopicIds().get().get(d.topicId()).name().equals(t("a"))));
        m.put("unknown", attempt(() -> admin.describeTopics(List.of(t("nope"))).allTopicNames().get()));
        m.put("unknown_id", attempt(() -> admin.describeTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid())))
            .allTopicIds().get()));
        return m;
    }

    static Map<String, Object> topicConfigs() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, t("a"));
        Config all = configs(r);
        m.put("names", all.entries().stream().map(ConfigEntry::name).sorted().collect(Collectors.toList()));
        m.put("created", configsOf(r, "retention.ms", "cleanup.policy", "segment.bytes", "min.insync.replicas",
            "message.timestamp.type", "compression.type", "max.message.bytes"));
        Object syn = attempt(() -> admin.describeConfigs(List.of(r), new DescribeConfigsOptions().includeSynonyms(true))
            .all().get().get(r).get("retention.ms").synonyms().stream().map(s -> s.name() + ":" + s.source())
            .collect(Collectors.toList()));
        m.put("retention_synonyms", syn);
        m.put("set_and_delete", alter(r, false, op("retention.ms", "999999", AlterConfigOp.OpType.SET),
            op("cleanup.policy", null, AlterConfigOp.OpType.DELETE)));
        // Brokers apply config changes from the metadata log: wait for the outcome Kafka documents (at most 60 s).
        m.put("after_set_and_delete", settle(() -> configsOf(r, "retention.ms", "cleanup.policy"),
            v -> "999999".equals(val(v, "retention.ms")) && "delete".equals(val(v, "cleanup.policy"))));
        m.put("append", alter(r, false, op("cleanup.policy", "compact", AlterConfigOp.OpType.APPEND)));
        m.put("after_append", settle(() -> configsOf(r, "cleanup.policy"), v -> "delete,compact".equals(val(v, "cleanup.policy"))));
        m.put("subtract", alter(r, false, op("cleanup.policy", "delete", AlterConfigOp.OpType.SUBTRACT)));
        m.put("after_subtract", settle(() -> configsOf(r, "cleanup.policy"), v -> "compact".equals(val(v, "cleanup.policy"))));
        m.put("validate_only", alter(r, true, op("retention.ms", "1000", AlterConfigOp.OpType.SET)));
        // Any broker may answer a describe, and one may not have read the last change yet: Kafka's do the same for
        // a few ms, Strata's for up to metadata.log.poll.interval.ms. Wait for the value as it must be by now; had
        // validateOnly changed it, it would never come (the describe returns 1000 after 60 s).
        m.put("after_validate_only", settle(() -> configsOf(r, "retention.ms"), v -> "999999".equals(val(v, "retention.ms"))));
        m.put("bad_value", alter(r, false, op("retention.ms", "soon", AlterConfigOp.OpType.SET)));
        m.put("unknown_name", alter(r, false, op("no.such.config", "1", AlterConfigOp.OpType.SET)));
        m.put("unknown_topic", alter(new ConfigResource(ConfigResource.Type.TOPIC, t("nope")), false,
            op("retention.ms", "1000", AlterConfigOp.OpType.SET)));
        m.put("describe_unknown_topic", attempt(() -> configs(new ConfigResource(ConfigResource.Type.TOPIC, t("nope")))));
        m.put("after_errors", settle(() -> configsOf(r, "retention.ms"), v -> "999999".equals(val(v, "retention.ms"))));
        return m;
    }

    static Map<String, Object> brokerConfigs() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        String id = Integer.toString(ids.get(0));
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, id);
        ConfigResource cluster = new ConfigResource(ConfigResource.Type.BROKER, "");
        m.put("described", configsOf(broker, "num.partitions", "log.retention.hours", "node.id", "log.dirs",
            "log.segment.bytes", "auto.create.topics.enable"));
        String before = valueOf(broker, "log.retention.ms");
        m.put("set_broker", alter(broker, false, op("log.retention.ms", "604800001", AlterConfigOp.OpType.SET)));
        m.put("after_set_broker", settle(() -> configsOf(broker, "log.retention.ms"),
            v -> "604800001".equals(val(v, "log.retention.ms"))));
        m.put("set_default", alter(cluster, false, op("log.retention.ms", "604800002", AlterConfigOp.OpType.SET)));
        m.put("default_described", settle(() -> configsOf(cluster, "log.retention.ms"),
            v -> "604800002".equals(val(v, "log.retention.ms"))));
        m.put("broker_over_default", configsOf(broker, "log.retention.ms"));
        m.put("delete_broker", alter(broker, false, op("log.retention.ms", null, AlterConfigOp.OpType.DELETE)));
        m.put("after_delete_broker", settle(() -> configsOf(broker, "log.retention.ms"),
            v -> "604800002".equals(val(v, "log.retention.ms"))));
        m.put("delete_default", alter(cluster, false, op("log.retention.ms", null, AlterConfigOp.OpType.DELETE)));
        Object restored = settle(() -> configsOf(broker, "log.retention.ms"), v -> Objects.equals(before, val(v, "log.retention.ms")));
        m.put("after_delete_default", restored);
        m.put("restored", Objects.equals(before, val(restored, "log.retention.ms")));
        m.put("static_config", alter(broker, false, op("log.dirs", "/tmp/elsewhere", AlterConfigOp.OpType.SET)));
        m.put("bad_value", alter(broker, false, op("log.retention.ms", "soon", AlterConfigOp.OpType.SET)));
        m.put("validate_only", alter(broker, true, op("log.retention.ms", "604800003", AlterConfigOp.OpType.SET)));
        m.put("after_validate_only", configsOf(broker, "log.retention.ms"));
        return m;
    }

    static Map<String, Object> createPartitions() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        String a = t("a");
        m.put("grow", attempt(() -> admin.createPartitions(Map.of(a, NewPartitions.increaseTo(5))).all().get()));
        m.put("after_grow", attempt(() -> settled(a, 5).partitions().size()));
        m.put("shrink", attempt(() -> admin.createPartitions(Map.of(a, NewPartitions.increaseTo(4))).all().get()));
        m.put("same", attempt(() -> admin.createPartitions(Map.of(a, NewPartitions.increaseTo(5))).all().get()));
        m.put("validate_only", attempt(() -> admin.createPartitions(Map.of(a, NewPartitions.increaseTo(6)),
            new CreatePartitionsOptions().validateOnly(true)).all().get()));
        m.put("after_validate_only", settle(() -> describe(a).partitions().size(), v -> v.equals(5)));
        m.put("unknown_topic", attempt(() -> admin.createPartitions(Map.of(t("nope"), NewPartitions.increaseTo(2))).all().get()));
        List<Integer> replicas = new ArrayList<>();
        for (int j = 0; j < rf; j++) replicas.add(ids.get((1 + j) % ids.size()));
        m.put("assigned_replicas", replicas);
        m.put("grow_assigned", attempt(() -> admin.createPartitions(Map.of(a,
            NewPartitions.increaseTo(6, List.of(replicas)))).all().get()));
        m.put("after_grow_assigned", attempt(() -> partitionView(settled(a, 6).partitions().get(5))));
        m.put("bad_assignment", attempt(() -> admin.createPartitions(Map.of(a,
            NewPartitions.increaseTo(7, List.of(List.of(99))))).all().get()));
        return m;
    }

    static Map<String, Object> groups() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        String a = t("a");
        String g1 = t("g-empty"), g2 = t("g-static"), g3 = t("g-848");
        // An empty group created by committing offsets.
        m.put("alter_new_group", attempt(() -> admin.alterConsumerGroupOffsets(g1, Map.of(tp(a, 0),
            new OffsetAndMetadata(5, "m5"), tp(a, 1), new OffsetAndMetadata(7))).all().get()));
        m.put("empty_offsets", offsetsView(g1));
        m.put("empty_described", groupView(g1));
        m.put("alter_again", attempt(() -> admin.alterConsumerGroupOffsets(g1, Map.of(tp(a, 0),
            new OffsetAndMetadata(3))).all().get()));
        m.put("empty_offsets_after_alter", offsetsView(g1));
        m.put("list_partitions", attempt(() -> {
            var spec = new ListConsumerGroupOffsetsSpec().topicPartitions(List.of(tp(a, 1), tp(a, 2)));
            var got = admin.listConsumerGroupOffsets(Map.of(g1, spec)).partitionsToOffsetAndMetadata(g1).get();
            Map<String, Object> r = new TreeMap<>();
            for (var e : got.entrySet()) r.put(Integer.toString(e.getKey().partition()), e.getValue() == null ? null : e.getValue().offset());
            return r;
        }));
        m.put("unknown_group_offsets", offsetsView(t("g-nope")));
        m.put("unknown_group_described", groupView(t("g-nope")));

        // A classic group with a static member, and a KIP-848 group, both live.
        try (KafkaConsumer<String, String> c2 = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, g2,
                ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "static-1", ConsumerConfig.CLIENT_ID_CONFIG, "client-static",
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "30000"));
             KafkaConsumer<String, String> c3 = consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, g3,
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer", ConsumerConfig.CLIENT_ID_CONFIG, "client-848"))) {
            c2.subscribe(List.of(a));
            c3.subscribe(List.of(a));
            pollUntilAssigned(c2, 6);
            pollUntilAssigned(c3, 6);
            c2.commitSync();
            c3.commitSync();
            m.put("static_assignment", parts(c2.assignment()));
            m.put("static_described", groupView(g2));
            m.put("848_described", groupView(g3));
            m.put("listed_live", listedGroups(g1, g2, g3));
            // Two groups' offsets in one call (one batched OffsetFetch).
            m.put("two_groups_offsets", attempt(() -> {
                var got = admin.listConsumerGroupOffsets(Map.of(g1, new ListConsumerGroupOffsetsSpec(),
                    g3, new ListConsumerGroupOffsetsSpec())).all().get();
                Map<String, Integer> counts = new TreeMap<>();
                for (var e : got.entrySet()) counts.put(e.getKey().substring(prefix.length() + 1), e.getValue().size());
                return counts;
            }));
            // KIP-848 group configs: the broker's default, then the group's own.
            ConfigResource gr = new ConfigResource(ConfigResource.Type.GROUP, g3);
            m.put("group_config_default", attempt(() -> configsOf(gr, "consumer.session.timeout.ms")));
            m.put("group_config_set", alter(gr, false, op("consumer.session.timeout.ms", "50000", AlterConfigOp.OpType.SET)));
            m.put("group_config_after_set", settle(() -> configsOf(gr, "consumer.session.timeout.ms"),
                v -> "50000".equals(val(v, "consumer.session.timeout.ms"))));
            m.put("group_config_out_of_range", alter(gr, false, op("consumer.session.timeout.ms", "1000", AlterConfigOp.OpType.SET)));
            m.put("group_config_unknown", alter(gr, false, op("no.such.config", "1", AlterConfigOp.OpType.SET)));
            m.put("live_offsets", offsetsView(g2));
            m.put("alter_live", attempt(() -> admin.alterConsumerGroupOffsets(g2, Map.of(tp(a, 0),
                new OffsetAndMetadata(1))).all().get()));
            m.put("alter_live_848", attempt(() -> admin.alterConsumerGroupOffsets(g3, Map.of(tp(a, 0),
                new OffsetAndMetadata(1))).all().get()));
            m.put("delete_live", attempt(() -> admin.deleteConsumerGroups(List.of(g2)).all().get()));
            m.put("delete_live_848", attempt(() -> admin.deleteConsumerGroups(List.of(g3)).all().get()));
            m.put("delete_offsets_subscribed", attempt(() -> admin.deleteConsumerGroupOffsets(g2, Set.of(tp(a, 0))).all().get()));
            m.put("delete_offsets_subscribed_848", attempt(() -> admin.deleteConsumerGroupOffsets(g3, Set.of(tp(a, 0))).all().get()));
            m.put("remove_unknown_static", attempt(() -> admin.removeMembersFromConsumerGroup(g2,
                new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove("nobody")))).all().get()));
            m.put("remove_static", attempt(() -> admin.removeMembersFromConsumerGroup(g2,
                new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove("static-1")))).all().get()));
            m.put("static_after_remove", groupView(g2));
            m.put("remove_all_848", attempt(() -> admin.removeMembersFromConsumerGroup(g3,
                new RemoveMembersFromConsumerGroupOptions()).all().get()));
            m.put("848_after_remove_all", groupView(g3));
        }
        m.put("static_after_close", groupView(g2));
        m.put("848_after_close", settle(() -> groupView(g3), v -> "Empty".equals(((Map<?, ?>) v).get("state"))));
        m.put("delete_offsets", attempt(() -> admin.deleteConsumerGroupOffsets(g1, Set.of(tp(a, 0))).all().get()));
        m.put("after_delete_offsets", offsetsView(g1));
        m.put("delete_offsets_unknown_group", attempt(() -> admin.deleteConsumerGroupOffsets(t("g-nope"), Set.of(tp(a, 0))).all().get()));
        m.put("listed_before_delete", listedGroups(g1, g2, g3));
        m.put("delete_groups", attempt(() -> admin.deleteConsumerGroups(List.of(g1, g2, g3)).all().get()));
        m.put("deleted_described", groupView(g1));
        m.put("delete_unknown_group", attempt(() -> admin.deleteConsumerGroups(List.of(t("g-nope"))).all().get()));
        m.put("listed_after_delete", listedGroups(g1, g2, g3));
        m.put("offsets_after_delete", offsetsView(g1));
        return m;
    }

    static Map<String, Object> listTopics() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        Set<String> names = admin.listTopics().names().get();
        m.put("mine", names.stream().filter(n -> n.startsWith(prefix + "-")).map(n -> n.substring(prefix.length() + 1))
            .sorted().collect(Collectors.toList()));
        m.put("internal_listed_by_default", names.contains("__consumer_offsets"));
        Collection<TopicListing> withInternal = admin.listTopics(new ListTopicsOptions().listInternal(true)).listings().get();
        m.put("internal_with_option", withInternal.stream().filter(TopicListing::isInternal).map(TopicListing::name)
            .sorted().collect(Collectors.toList()));
        m.put("listing_ids_set", withInternal.stream().allMatch(l -> l.topicId() != null && !l.topicId().equals(Uuid.ZERO_UUID)));
        return m;
    }

    static Map<String, Object> deleteRecords() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        String e = t("records");
        admin.createTopics(List.of(new NewTopic(e, 1, rf))).all().get();
        settled(e, 1);
        produce(e, 0, 10, null);
        TopicPartition p = tp(e, 0);
        m.put("delete_to_4", attempt(() -> admin.deleteRecords(Map.of(p, RecordsToDelete.beforeOffset(4)))
            .lowWatermarks().get(p).get().lowWatermark()));
        m.put("earliest_after", admin.listOffsets(Map.of(p, OffsetSpec.earliest())).partitionResult(p).get().offset());
        m.put("delete_backwards", attempt(() -> admin.deleteRecords(Map.of(p, RecordsToDelete.beforeOffset(2)))
            .lowWatermarks().get(p).get().lowWatermark()));
        m.put("delete_past_end", attempt(() -> admin.deleteRecords(Map.of(p, RecordsToDelete.beforeOffset(100)))
            .lowWatermarks().get(p).get().lowWatermark()));
        m.put("delete_to_high_watermark", attempt(() -> admin.deleteRecords(Map.of(p, RecordsToDelete.beforeOffset(-1)))
            .lowWatermarks().get(p).get().lowWatermark()));
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            c.assign(List.of(p));
            c.seekToBeginning(List.of(p));
            m.put("consumer_beginning", c.position(p));
        }
        return m;
    }

    static Map<String, Object> listOffsets() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        String f = t("times");
        admin.createTopics(List.of(new NewTopic(f, 1, rf))).all().get();
        settled(f, 1);
        // One record per batch; the largest timestamp is not the last record's.
        produce(f, 0, 5, new Long[] {base, base + 5000, base + 1000, base + 2000, base + 3000});
        TopicPartition p = tp(f, 0);
        Map<String, OffsetSpec> specs = new LinkedHashMap<>();
        specs.put("earliest", OffsetSpec.earliest());
        specs.put("latest", OffsetSpec.latest());
        specs.put("max_timestamp", OffsetSpec.maxTimestamp());
        specs.put("earliest_local", OffsetSpec.earliestLocal());
        specs.put("latest_tiered", OffsetSpec.latestTiered());
        specs.put("ts_before_all", OffsetSpec.forTimestamp(base - 1));
        specs.put("ts_1500", OffsetSpec.forTimestamp(base + 1500));
        specs.put("ts_5000", OffsetSpec.forTimestamp(base + 5000));
        specs.put("ts_after_all", OffsetSpec.forTimestamp(base + 6000));
        for (var e : specs.entrySet()) {
            m.put(e.getKey(), attempt(() -> {
                ListOffsetsResult.ListOffsetsResultInfo i = admin.listOffsets(Map.of(p, e.getValue())).partitionResult(p).get();
                return List.of(i.offset(), i.timestamp() < 0 ? i.timestamp() : i.timestamp() - base);
            }));
        }
        m.put("read_committed_latest", attempt(() -> admin.listOffsets(Map.of(p, OffsetSpec.latest()),
            new ListOffsetsOptions(IsolationLevel.READ_COMMITTED)).partitionResult(p).get().offset()));
        m.put("unknown_topic", attempt(() -> admin.listOffsets(Map.of(tp(t("nope"), 0), OffsetSpec.latest())).all().get()));
        m.put("several", attempt(() -> {
            Map<TopicPartition, OffsetSpec> q = new HashMap<>();
            for (int i = 0; i < 6; i++) q.put(tp(t("a"), i), OffsetSpec.latest());
            q.put(p, OffsetSpec.latest());
            return admin.listOffsets(q).all().get().size();
        }));
        return m;
    }

    static Map<String, Object> logDirs() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        String e = t("records");
        Map<Integer, Map<String, LogDirDescription>> all = admin.describeLogDirs(ids).allDescriptions().get();
        m.put("brokers", new TreeSet<>(all.keySet()));
        List<Map<String, Object>> replicas = new ArrayList<>();
        for (var b : new TreeMap<>(all).entrySet()) {
            for (var d : b.getValue().entrySet()) {
                ReplicaInfo ri = d.getValue().replicaInfos().get(tp(e, 0));
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("broker", b.getKey());
                r.put("dir_absolute", d.getKey().startsWith("/"));
                r.put("dir_error", d.getValue().error() == null ? null : d.getValue().error().getClass().getSimpleName());
                r.put("total_bytes_known", d.getValue().totalBytes().isPresent());
                r.put("usable_bytes_known", d.getValue().usableBytes().isPresent());
                r.put("has_records_replica", ri != null);
                if (ri != null) {
                    r.put("size_positive", ri.size() > 0);
                    r.put("offset_lag", ri.offsetLag());
                    r.put("future", ri.isFuture());
                }
                replicas.add(r);
            }
        }
        m.put("dirs", replicas);
        m.put("replica_log_dir", attempt(() -> {
            var info = admin.describeReplicaLogDirs(List.of(new TopicPartitionReplica(e, 0, ids.get(0)))).all().get()
                .values().iterator().next();
            return info.getCurrentReplicaLogDir() != null;
        }));
        return m;
    }

    static Map<String, Object> electLeaders() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        String a = t("assigned");
        m.put("preferred_already", attempt(() -> admin.electLeaders(ElectionType.PREFERRED, Set.of(tp(a, 0)))
            .partitions().get().get(tp(a, 0)).map(x -> x.getClass().getSimpleName()).orElse("ok")));
        m.put("unclean_healthy", attempt(() -> admin.electLeaders(ElectionType.UNCLEAN, Set.of(tp(a, 0)))
            .partitions().get().get(tp(a, 0)).map(x -> x.getClass().getSimpleName()).orElse("ok")));
        m.put("unknown_partition", attempt(() -> admin.electLeaders(ElectionType.PREFERRED, Set.of(tp(t("nope"), 0)))
            .partitions().get().get(tp(t("nope"), 0)).map(x -> x.getClass().getSimpleName()).orElse("ok")));
        m.put("all_partitions_elected", attempt(() -> admin.electLeaders(ElectionType.PREFERRED, null)
            .partitions().get().keySet().stream().filter(x -> x.topic().startsWith(prefix)).count()));
        if (ids.size() < 3) return m;
        // Reorder the replicas (same set): the leader stays, then a preferred election moves it to the new first.
        String r = t("elect");
        admin.createTopics(List.of(new NewTopic(r, Map.of(0, List.of(ids.get(0), ids.get(1), ids.get(2)))))).all().get();
        settled(r, 1);
        produce(r, 0, 5, null);
        m.put("reorder", attempt(() -> admin.alterPartitionReassignments(Map.of(tp(r, 0), Optional.of(
            new NewPartitionReassignment(List.of(ids.get(1), ids.get(2), ids.get(0)))))).all().get()));
        m.put("after_reorder", settle(() -> partitionView(describe(r).partitions().get(0)),
            v -> ((Map<?, ?>) v).get("replicas").equals(List.of(ids.get(1), ids.get(2), ids.get(0)))));
        waitFor("reorder done", () -> admin.listPartitionReassignments().reassignments().get().isEmpty());
        m.put("elect_reordered", attempt(() -> admin.electLeaders(ElectionType.PREFERRED, Set.of(tp(r, 0)))
            .partitions().get().get(tp(r, 0)).map(x -> x.getClass().getSimpleName()).orElse("ok")));
        m.put("after_elect", settle(() -> partitionView(describe(r).partitions().get(0)),
            v -> ids.get(1).equals(((Map<?, ?>) v).get("leader")) && ((List<?>) ((Map<?, ?>) v).get("isr")).size() == 3));
        return m;
    }

    static Map<String, Object> reassignments() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        String s = t("move");
        List<Integer> from = ids.size() >= 3 ? List.of(ids.get(0), ids.get(1)) : List.of(ids.get(0));
        List<Integer> to = ids.size() >= 3 ? List.of(ids.get(1), ids.get(2)) : List.of(ids.get(0));
        admin.createTopics(List.of(new NewTopic(s, Map.of(0, from)))).all().get();
        settled(s, 1);
        produce(s, 0, 20, null);
        TopicPartition p = tp(s, 0);
        m.put("none_listed", attempt(() -> admin.listPartitionReassignments(Set.of(p)).reassignments().get().size()));
        m.put("to_unknown_broker", attempt(() -> admin.alterPartitionReassignments(Map.of(p, Optional.of(
            new NewPartitionReassignment(List.of(99))))).all().get()));
        m.put("cancel_none", attempt(() -> admin.alterPartitionReassignments(Map.of(p, Optional.empty())).all().get()));
        m.put("unknown_topic", attempt(() -> admin.alterPartitionReassignments(Map.of(tp(t("nope"), 0), Optional.of(
            new NewPartitionReassignment(List.of(ids.get(0)))))).all().get()));
        m.put("move", attempt(() -> admin.alterPartitionReassignments(Map.of(p, Optional.of(
            new NewPartitionReassignment(to)))).all().get()));
        m.put("after_move", settle(() -> partitionView(describe(s).partitions().get(0)),
            v -> ((Map<?, ?>) v).get("replicas").equals(to) && ((List<?>) ((Map<?, ?>) v).get("isr")).size() == to.size()));
        m.put("listed_after", settle(() -> admin.listPartitionReassignments().reassignments().get().size(), v -> v.equals(0)));
        // Every record is still there, read from the new replicas' leader.
        try (KafkaConsumer<String, String> c = consumer(Map.of())) {
            c.assign(List.of(p));
            c.seekToBeginning(List.of(p));
            List<String> values = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60000;
            while (values.size() < 20 && System.currentTimeMillis() < deadline)
                for (var rec : c.poll(Duration.ofMillis(200))) values.add(rec.value());
            List<String> want = new ArrayList<>();
            for (int i = 0; i < 20; i++) want.add("v" + i);
            m.put("records_after_move", values.equals(want));
        }
        return m;
    }

    static Map<String, Object> deleteTopics() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>();
        Uuid id = describe(t("assigned")).topicId();
        m.put("delete", attempt(() -> admin.deleteTopics(List.of(t("a"), t("default"))).all().get()));
        m.put("delete_by_id", attempt(() -> admin.deleteTopics(TopicCollection.ofTopicIds(List.of(id))).all().get()));
        m.put("delete_unknown", attempt(() -> admin.deleteTopics(List.of(t("nope"))).all().get()));
        m.put("delete_unknown_id", attempt(() -> admin.deleteTopics(TopicCollection.ofTopicIds(List.of(Uuid.randomUuid()))).all().get()));
        Call listed = () -> admin.listTopics().names().get().stream().filter(n -> n.equals(t("a")) || n.equals(t("assigned"))
            || n.equals(t("default"))).count();
        m.put("listed_after", settle(listed, v -> v.equals(0L)));
        m.put("describe_after", settle(() -> attempt(() -> describe(t("a"))), v -> v instanceof String));
        m.put("recreate", attempt(() -> admin.createTopics(List.of(new NewTopic(t("a"), 1, rf))).all().get()));
        m.put("recreated_partitions", attempt(() -> settled(t("a"), 1).partitions().size()));
        // Every broker learns of the new topic (and forgets the old one) from the metadata log, with a lag.
        Call latest = () -> admin.listOffsets(Map.of(tp(t("a"), 0), OffsetSpec.latest())).partitionResult(tp(t("a"), 0)).get().offset();
        m.put("recreated_empty", settle(latest, v -> v.equals(0L)));
        return m;
    }
}
