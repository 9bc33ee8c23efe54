// A KIP-932 share-group consumer for the integration tests (run in source-file mode:
// `integration/rig java integration/clients/java/ShareConsume.java ARGS`; the rig puts the
// Kafka client jars on the classpath).
//
// Args: BOOTSTRAP ADMIN_BOOTSTRAP TOPIC GROUP MAX_RECORDS TIMEOUT_MS [RELEASE]
//   BOOTSTRAP        where the share consumer connects (the gateway's client listener)
//   ADMIN_BOOTSTRAP  where the group's share.auto.offset.reset=earliest is set (the brokers);
//                    `-` sets nothing (the group starts where its share partitions' state says)
//   MAX_RECORDS      stop once this many distinct records (partition, offset) were delivered
//   RELEASE          optional, comma-separated offsets acknowledged RELEASE (given back to the
//                    group, delivered again later) instead of ACCEPT
// Prints one JSON line per record delivered to the application:
//   {"partition":P,"offset":O,"key":"K"|null,"delivery_count":D,"ack":"accept"|"release"}
// then {"done":N}. Records are acknowledged as they are delivered (ACCEPT unless in RELEASE).
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ShareConsume {
    static String json(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 6 && args.length != 7) {
            System.err.println("usage: ShareConsume BOOTSTRAP ADMIN_BOOTSTRAP TOPIC GROUP MAX_RECORDS TIMEOUT_MS [RELEASE]");
            System.exit(2);
        }
        String bootstrap = args[0];
        String adminBootstrap = args[1];
        String topic = args[2];
        String group = args[3];
        int max = Integer.parseInt(args[4]);
        long timeoutMs = Long.parseLong(args[5]);
        Set<Long> release = new HashSet<>();
        if (args.length == 7 && !args[6].isEmpty()) {
            for (String o : args[6].split(",")) {
                release.add(Long.parseLong(o.trim()));
            }
        }

        if (!adminBootstrap.equals("-")) {
            Properties ap = new Properties();
            ap.put("bootstrap.servers", adminBootstrap);
            try (Admin admin = Admin.create(ap)) {
                ConfigResource g = new ConfigResource(ConfigResource.Type.GROUP, group);
                AlterConfigOp earliest = new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
                admin.incrementalAlterConfigs(Map.of(g, List.of(earliest))).all().get();
            }
        }

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        int got = 0;
        Set<String> distinct = new HashSet<>();
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (distinct.size() < max && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    boolean rel = release.contains(r.offset());
                    System.out.println("{\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
                        + ",\"key\":" + json(r.key()) + ",\"delivery_count\":"
                        + r.deliveryCount().map(String::valueOf).orElse("null")
                        + ",\"ack\":\"" + (rel ? "release" : "accept") + "\"}");
                    c.acknowledge(r, rel ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                    distinct.add(r.partition() + ":" + r.offset());
                    got++;
                }
                c.commitSync();
            }
        }
        System.out.println("{\"done\":" + got + "}");
        System.out.flush();
    }
}
