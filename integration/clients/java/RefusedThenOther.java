// One Kafka Java producer for the integration tests (run in source-file mode:
// `integration/rig java integration/clients/java/RefusedThenOther.java ARGS`; the rig puts the
// Kafka client jars on the classpath).
//
// Args: BOOTSTRAP REFUSED_TOPIC OTHER_TOPIC COUNT
// With one idempotent producer (acks=all), sends one record to REFUSED_TOPIC and waits for its
// outcome, then sends COUNT records to OTHER_TOPIC. Prints one JSON line for the refused send
// {"refused":true|false,"error":CLASS|null,"message":TEXT|null,"millis":MS}, one per other record
// {"topic":T,"partition":P,"offset":O,"value":V} or {"error":TEXT}, then {"done":N} with how many
// of the other records were acknowledged.
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

public class RefusedThenOther {
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
        if (args.length != 4) {
            System.err.println("usage: RefusedThenOther BOOTSTRAP REFUSED_TOPIC OTHER_TOPIC COUNT");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("delivery.timeout.ms", "30000");
        p.put("request.timeout.ms", "10000");
        p.put("max.block.ms", "30000");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        int count = Integer.parseInt(args[3]);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            long t = System.currentTimeMillis();
            try {
                producer.send(new ProducerRecord<>(args[1], "refused", "refused")).get();
                System.out.println("{\"refused\":false,\"error\":null,\"message\":null,\"millis\":"
                        + (System.currentTimeMillis() - t) + "}");
            } catch (ExecutionException e) {
                Throwable c = e.getCause();
                System.out.println("{\"refused\":true,\"error\":" + json(c.getClass().getSimpleName())
                        + ",\"message\":" + json(c.getMessage()) + ",\"millis\":"
                        + (System.currentTimeMillis() - t) + "}");
            }
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(args[2], "key-" + i, "value-" + i)));
            }
            int done = 0;
            for (int i = 0; i < count; i++) {
                try {
                    RecordMetadata m = sent.get(i).get();
                    System.out.println("{\"topic\":" + json(m.topic()) + ",\"partition\":" + m.partition()
                            + ",\"offset\":" + m.offset() + ",\"value\":" + json("value-" + i) + "}");
                    done++;
                } catch (ExecutionException e) {
                    System.out.println("{\"error\":" + json(String.valueOf(e.getCause())) + "}");
                }
            }
            System.out.println("{\"done\":" + done + "}");
        }
    }
}
