// A KIP-932 share-group consumer for the integration tests (run in source-file mode:
// `integration/rig java integration/clients/java/ShareConsume.java ARGS`; the rig puts the
// Kafka client jars on the classpath).
//
// Args: BOOTSTRAP ADMIN_BOOTSTRAP TOPIC GROUP MAX_RECORDS TIMEOUT_MS
//   BOOTSTRAP        where the share consumer connects (the gateway's client listener)
//   ADMIN_BOOTSTRAP  where the group's share.auto.offset.reset=earliest is set (the brokers)
// Prints one JSON line per record delivered to the application:
//   {"partition":P,"offset":O,"key":"K"|null,"delivery_count":D}
// then {"done":N}. Records are acknowledged (ACCEPT) as they are delivered.
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;

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
        if (args.length != 6) {
            System.err.println("usage: ShareConsume BOOTSTRAP ADMIN_BOOTSTRAP TOPIC GROUP MAX_RECORDS TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0];
        String adminBootstrap = args[1];
        String topic = args[2];
        String group = args[3];
        int max = Integer.parseInt(args[4]);
        long timeoutMs = Long.parseLong(args[5]);

        Properties ap = new Properties();
        ap.put("bootstrap.servers", adminBootstrap);
        try (Admin admin = Admin.create(ap)) {
            ConfigResource g = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp earliest = new AlterConfigOp(
                new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(g, List.of(earliest))).all().get();
        }

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("share.acknowledgement.mode", "explicit");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        int got = 0;
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (got < max && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    System.out.println("{\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
                        + ",\"key\":" + json(r.key()) + ",\"delivery_count\":"
                        + r.deliveryCount().map(String::valueOf).orElse("null") + "}");
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                    got++;
                }
                c.commitSync();
            }
        }
        System.out.println("{\"done\":" + got + "}");
        System.out.flush();
    }
}
