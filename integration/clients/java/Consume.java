// A Kafka Java consumer for the integration tests (run in source-file mode:
// `integration/rig java integration/clients/java/Consume.java ARGS`; the rig puts the Kafka
// client jars on the classpath). The counterpart of integration/clients/python_consume.py.
//
// Args: BOOTSTRAP TOPIC GROUP COUNT ISOLATION TIMEOUT_MS
// Consumes TOPIC from the beginning with consumer group GROUP (isolation.level ISOLATION:
// read_uncommitted or read_committed) until COUNT records arrived or TIMEOUT_MS passed, keeps
// polling for one more second (so that an extra record would show), commits, and prints one JSON
// line per record {"partition":P,"offset":O,"key":K|null,"value":V|null}, then
// {"done":N,"positions":{"P":POSITION,...}} with the consumer's position per partition.
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class Consume {
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
            System.err.println("usage: Consume BOOTSTRAP TOPIC GROUP COUNT ISOLATION TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        int count = Integer.parseInt(args[3]);
        String isolation = args[4];
        long timeoutMs = Long.parseLong(args[5]);

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", isolation);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        int seen = 0;
        StringBuilder positions = new StringBuilder("{");
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + timeoutMs;
            long extraUntil = -1;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    System.out.println("{\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
                        + ",\"key\":" + json(r.key()) + ",\"value\":" + json(r.value()) + "}");
                    seen++;
                }
                if (seen >= count && extraUntil < 0) {
                    extraUntil = System.currentTimeMillis() + 1000;
                }
                if (extraUntil >= 0 && System.currentTimeMillis() >= extraUntil) {
                    break;
                }
            }
            c.commitSync();
            String sep = "";
            for (TopicPartition tp : c.assignment()) {
                positions.append(sep).append('"').append(tp.partition()).append("\":")
                    .append(c.position(tp));
                sep = ",";
            }
        }
        positions.append('}');
        System.out.println("{\"done\":" + seen + ",\"positions\":" + positions + "}");
        System.out.flush();
    }
}
