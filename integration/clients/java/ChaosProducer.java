// An idempotent producer of the chaos run (`mirrorgate-bench chaos`), run in source-file mode:
// `integration/rig java integration/clients/java/ChaosProducer.java ARGS` (the rig puts the
// Kafka client jars on the classpath).
//
// Args: BOOTSTRAP TOPIC NAME PER_SECOND [KEY=VALUE...]
//   KEY=VALUE pairs set (or override) the producer's properties.
//   Sends records keyed and valued NAME-N (N = 0, 1, ...) at about PER_SECOND, acks=all,
//   idempotence on, until a line "stop" (or end of input) on stdin; then flushes, waits at most
//   10 s for outstanding answers and exits. A producer whose state turns fatal is closed and a new
//   one created (a new producer id), as an application would.
// Prints one JSON line per event, each with the time in ms:
//   {"e":"send","k":K,"t":T}                 before the record is handed to the client
//   {"e":"ack","k":K,"p":P,"o":O,"t":T}      acknowledged at partition P, offset O
//   {"e":"err","k":K,"r":REASON,"t":T}       failed (the record may or may not have been written)
//   {"e":"done","t":T}
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class ChaosProducer {
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

    static KafkaProducer<String, String> producer(String bootstrap, String[] extra) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("max.in.flight.requests.per.connection", "5");
        p.put("linger.ms", "5");
        p.put("retries", Integer.toString(Integer.MAX_VALUE));
        p.put("request.timeout.ms", "5000");
        p.put("delivery.timeout.ms", "30000");
        p.put("max.block.ms", "5000");
        p.put("reconnect.backoff.max.ms", "500");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        for (String kv : extra) {
            int eq = kv.indexOf('=');
            if (eq <= 0) {
                System.err.println("not KEY=VALUE: " + kv);
                System.exit(2);
            }
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        return new KafkaProducer<>(p);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: ChaosProducer BOOTSTRAP TOPIC NAME PER_SECOND [KEY=VALUE...]");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        String name = args[2];
        double perSecond = Double.parseDouble(args[3]);
        String[] extra = java.util.Arrays.copyOfRange(args, 4, args.length);
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

        KafkaProducer<String, String> producer = producer(bootstrap, extra);
        long n = 0;
        long next = System.nanoTime();
        while (!stop.get()) {
            long wait = next - System.nanoTime();
            if (wait > 0) {
                TimeUnit.NANOSECONDS.sleep(wait);
            }
            next += gapNanos;
            String key = name + "-" + n;
            emit("{\"e\":\"send\",\"k\":" + json(key) + ",\"t\":" + now() + "}");
            try {
                producer.send(new ProducerRecord<>(topic, key, key), (md, ex) -> {
                    if (ex == null) {
                        emit("{\"e\":\"ack\",\"k\":" + json(key) + ",\"p\":" + md.partition()
                            + ",\"o\":" + md.offset() + ",\"t\":" + now() + "}");
                    } else {
                        emit("{\"e\":\"err\",\"k\":" + json(key) + ",\"r\":"
                            + json(ex.getClass().getSimpleName() + ": " + ex.getMessage())
                            + ",\"t\":" + now() + "}");
                    }
                });
            } catch (Exception e) {
                // A fatal producer state (or a send that could not even be queued): the record
                // was not handed over; a new producer takes over, as an application would.
                emit("{\"e\":\"err\",\"k\":" + json(key) + ",\"r\":"
                    + json("not sent: " + e.getClass().getSimpleName() + ": " + e.getMessage())
                    + ",\"t\":" + now() + "}");
                try {
                    producer.close(java.time.Duration.ofSeconds(5));
                } catch (Exception ignored) {
                    // closing a failed producer
                }
                producer = producer(bootstrap, extra);
            }
            n++;
        }
        try {
            producer.flush();
        } catch (Exception ignored) {
            // outstanding records are reported through their callbacks
        }
        producer.close(java.time.Duration.ofSeconds(10));
        emit("{\"e\":\"done\",\"t\":" + now() + "}");
    }
}
