// A transactional producer of the chaos run (`mirrorgate-bench chaos`), run in source-file mode:
// `integration/rig java integration/clients/java/ChaosTxnProducer.java ARGS` (the rig puts the
// Kafka client jars on the classpath).
//
// Args: BOOTSTRAP TOPIC NAME PER_SECOND
//   Writes records keyed and valued NAME-N (N = 0, 1, ...) at about PER_SECOND, in transactions
//   of 4 records (transactional.id NAME), committing each one except every fifth, which it
//   aborts, until a line "stop" (or end of input) on stdin; the transaction under way then ends
//   as planned and the producer exits. A producer whose state turns fatal is closed and a new one
//   created with the same transactional id (which fences the old one), as an application would.
// Prints one JSON line per event, each with the time in ms:
//   {"e":"send","k":K,"t":T}                 before the record is handed to the client
//   {"e":"ack","k":K,"p":P,"o":O,"t":T}      its transaction committed (P, O: where it was written)
//   {"e":"err","k":K,"r":REASON,"t":T}       aborted, or the transaction's outcome is not known
//   {"e":"done","t":T}
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

public class ChaosTxnProducer {
    static final int PER_TRANSACTION = 4;
    static final int ABORT_EVERY = 5;

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

    static long now() {
        return System.currentTimeMillis();
    }

    static void failed(List<String> keys, String reason) {
        for (String k : keys) {
            emit("{\"e\":\"err\",\"k\":" + json(k) + ",\"r\":" + json(reason) + ",\"t\":" + now() + "}");
        }
    }

    static KafkaProducer<String, String> producer(String bootstrap, String txid) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txid);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("linger.ms", "5");
        p.put("request.timeout.ms", "5000");
        p.put("delivery.timeout.ms", "30000");
        p.put("max.block.ms", "10000");
        p.put("transaction.timeout.ms", "30000");
        p.put("reconnect.backoff.max.ms", "500");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        KafkaProducer<String, String> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        return producer;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: ChaosTxnProducer BOOTSTRAP TOPIC NAME PER_SECOND");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        String name = args[2];
        double perSecond = Double.parseDouble(args[3]);
        long gapNanos = (long) (1e9 / Math.max(perSecond, 0.1));

        AtomicBoolean stop = new AtomicBoolean(false);
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("stop")) {
                        break;
                    }
                }
            } catch (Exception e) {
                // end of input: stop
            }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();

        KafkaProducer<String, String> producer = null;
        long n = 0;
        long txn = 0;
        long next = System.nanoTime();
        while (!stop.get()) {
            List<String> keys = new ArrayList<>();
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            boolean abort = txn % ABORT_EVERY == ABORT_EVERY - 1;
            txn++;
            try {
                if (producer == null) {
                    producer = producer(bootstrap, name);
                }
                producer.beginTransaction();
                for (int i = 0; i < PER_TRANSACTION; i++) {
                    long wait = next - System.nanoTime();
                    if (wait > 0) {
                        TimeUnit.NANOSECONDS.sleep(wait);
                    }
                    next += gapNanos;
                    String key = name + "-" + n++;
                    keys.add(key);
                    emit("{\"e\":\"send\",\"k\":" + json(key) + ",\"t\":" + now() + "}");
                    sent.add(producer.send(new ProducerRecord<>(topic, key, key)));
                }
                if (abort) {
                    producer.abortTransaction();
                    failed(keys, "aborted");
                    continue;
                }
                producer.commitTransaction();
                for (int i = 0; i < keys.size(); i++) {
                    RecordMetadata md = sent.get(i).get();
                    emit("{\"e\":\"ack\",\"k\":" + json(keys.get(i)) + ",\"p\":" + md.partition()
                        + ",\"o\":" + md.offset() + ",\"t\":" + now() + "}");
                }
            } catch (Exception e) {
                // Committed or not: the outcome is not known. The producer is created again
                // (a new epoch of the same transactional id ends what the old one left open).
                failed(keys, "outcome unknown: " + e.getClass().getSimpleName() + ": " + e.getMessage());
                if (producer != null) {
                    try {
                        producer.close(java.time.Duration.ofSeconds(5));
                    } catch (Exception ignored) {
                        // closing a failed producer
                    }
                }
                producer = null;
                TimeUnit.MILLISECONDS.sleep(500);
                next = System.nanoTime();
            }
        }
        if (producer != null) {
            producer.close(java.time.Duration.ofSeconds(10));
        }
        emit("{\"e\":\"done\",\"t\":" + now() + "}");
    }
}
