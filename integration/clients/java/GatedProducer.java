// An idempotent producer that gets its producer id *before* a failover and writes after it, for
// the integration tests (run in source-file mode: `integration/rig java
// integration/clients/java/GatedProducer.java ARGS`; the rig puts the Kafka client jars on the
// classpath).
//
// Args: BOOTSTRAP WARM_TOPIC TOPIC COUNT KEYS PREFIX GATE_FILE TIMEOUT_MS
//   1. sends one record to WARM_TOPIC and waits for its acknowledgement (the producer now holds
//      its producer id and epoch);
//   2. waits until GATE_FILE exists (at most TIMEOUT_MS);
//   3. sends COUNT records to TOPIC, all at once (max.in.flight 5, one record per batch):
//      record i has key PREFIX-k(i % KEYS) and value PREFIX-i;
//   4. flushes and closes.
// Prints one JSON line per event: {"event":"warm"}, {"event":"ack","key":K,"value":V,
// "partition":P,"offset":O}, {"event":"error","value":V,"reason":R}, then {"event":"done"}.
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class GatedProducer {
    static String json(String s) {
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

    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 8) {
            System.err.println(
                "usage: GatedProducer BOOTSTRAP WARM_TOPIC TOPIC COUNT KEYS PREFIX GATE_FILE TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0];
        String warm = args[1];
        String topic = args[2];
        int count = Integer.parseInt(args[3]);
        int keys = Integer.parseInt(args[4]);
        String prefix = args[5];
        Path gate = Path.of(args[6]);
        long timeoutMs = Long.parseLong(args[7]);

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("max.in.flight.requests.per.connection", "5");
        p.put("linger.ms", "0");
        p.put("batch.size", "1");
        p.put("retries", Integer.toString(Integer.MAX_VALUE));
        p.put("request.timeout.ms", "10000");
        p.put("delivery.timeout.ms", Long.toString(timeoutMs));
        p.put("max.block.ms", Long.toString(timeoutMs));
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.send(new ProducerRecord<>(warm, "warm", prefix + "-warm"))
                .get(timeoutMs, TimeUnit.MILLISECONDS);
            emit("{\"event\":\"warm\"}");
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (!Files.exists(gate)) {
                if (System.currentTimeMillis() > deadline) {
                    emit("{\"event\":\"error\",\"value\":\"\",\"reason\":\"gate never opened\"}");
                    System.exit(1);
                }
                Thread.sleep(20);
            }
            for (int i = 0; i < count; i++) {
                String key = prefix + "-k" + (i % keys);
                String value = prefix + "-" + i;
                producer.send(new ProducerRecord<>(topic, key, value), (md, e) -> {
                    if (e != null) {
                        emit("{\"event\":\"error\",\"value\":" + json(value) + ",\"reason\":"
                            + json(e.toString()) + "}");
                    } else {
                        emit("{\"event\":\"ack\",\"key\":" + json(key) + ",\"value\":" + json(value)
                            + ",\"partition\":" + md.partition() + ",\"offset\":" + md.offset() + "}");
                    }
                });
            }
            producer.flush();
        }
        emit("{\"event\":\"done\"}");
    }
}
