// A transactional producer that initialises *before* a failover and commits a transaction after
// it, for the integration tests (run in source-file mode: `integration/rig java
// integration/clients/java/GatedTxnProducer.java ARGS`; the rig puts the Kafka client jars on the
// classpath).
//
// Args: BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT GATE_FILE TIMEOUT_MS
//   1. initTransactions() (the producer now holds its producer id and epoch), then creates
//      GATE_FILE.ready;
//   2. waits until GATE_FILE exists (at most TIMEOUT_MS);
//   3. one transaction of COUNT records to partition 0 of TOPIC (value TRANSACTIONAL_ID-rI),
//      committed; on an error it aborts the transaction and tries again, and when the producer
//      cannot abort (a fatal error) it closes the producer and creates it again, as an
//      application restarted by its supervisor would (at most 3 attempts).
// Prints one JSON line per event: {"event":"ready"}, {"event":"aborted","reason":R},
// {"event":"recreated","reason":R}, {"event":"committed","attempt":N}, then {"event":"done"}.
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.serialization.StringSerializer;

public class GatedTxnProducer {
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

    static void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /// The exception's message and those of its causes.
    static String reason(Throwable e) {
        StringBuilder b = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (b.length() > 0) {
                b.append(" / ");
            }
            b.append(t.getClass().getSimpleName()).append(": ").append(t.getMessage());
        }
        return b.toString();
    }

    static KafkaProducer<String, String> create(Properties p) {
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        return producer;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println(
                "usage: GatedTxnProducer BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT GATE_FILE TIMEOUT_MS");
            System.exit(2);
        }
        String topic = args[1];
        String txid = args[2];
        int count = Integer.parseInt(args[3]);
        Path gate = Path.of(args[4]);
        long timeoutMs = Long.parseLong(args[5]);
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("transactional.id", txid);
        p.put("acks", "all");
        p.put("max.block.ms", Long.toString(timeoutMs));
        p.put("delivery.timeout.ms", Long.toString(timeoutMs));
        p.put("request.timeout.ms", "20000");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> producer = create(p);
        emit("{\"event\":\"ready\"}");
        Files.createFile(Path.of(args[4] + ".ready"));
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!Files.exists(gate)) {
            if (System.currentTimeMillis() > deadline) {
                emit("{\"event\":\"error\",\"reason\":\"gate never opened\"}");
                System.exit(1);
            }
            Thread.sleep(20);
        }
        for (int attempt = 1; attempt <= 3; attempt++) {
            try {
                producer.beginTransaction();
                for (int i = 0; i < count; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, "k" + i, txid + "-r" + i));
                }
                producer.commitTransaction();
                emit("{\"event\":\"committed\",\"attempt\":" + attempt + "}");
                break;
            } catch (KafkaException e) {
                try {
                    producer.abortTransaction();
                    emit("{\"event\":\"aborted\",\"reason\":" + json(reason(e)) + "}");
                } catch (KafkaException fatal) {
                    producer.close();
                    producer = create(p);
                    emit("{\"event\":\"recreated\",\"reason\":" + json(reason(e)) + "}");
                }
            }
        }
        producer.close();
        emit("{\"event\":\"done\"}");
    }
}
