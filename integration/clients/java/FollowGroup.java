// A Kafka Java consumer group member for `mirrorgate-bench consumer-failover` (run in
// source-file mode: `integration/rig java integration/clients/java/FollowGroup.java ARGS`; the rig
// puts the Kafka client jars on the classpath).
//
// Args: MODE BOOTSTRAP TOPIC GROUP COMMIT_MS TIMEOUT_MS [PROTOCOL]
//   PROTOCOL: the group protocol, `classic` (the default) or `consumer` (KIP-848).
//   follow  reads TOPIC with consumer group GROUP (from its committed offsets, else the earliest)
//           and auto-commits every COMMIT_MS, until TIMEOUT_MS passed or it is killed: the
//           application on the source.
//   resume  creates the consumer, prints {"ready":T}, waits for one line on stdin, prints
//           {"go":T}, then reads TOPIC with GROUP until its position reaches the end offsets of
//           every assigned partition (or TIMEOUT_MS passed), commits and prints {"done":N}: the
//           same application started again on the destination (its JVM already running, so
//           that the time measured is the group's, not the JVM's start).
// Output, one JSON line each: {"assigned":[P,...]} after each assignment, and per record
// {"p":P,"o":OFFSET,"k":KEY,"t":MS}, T and MS being wall-clock milliseconds since the epoch
// (MS when the poll that returned the record ended). Lines are flushed after each poll, before
// the next poll commits: an offset is committed only once its records were printed.
import java.io.BufferedOutputStream;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class FollowGroup {
    static String quoted(String s) {
        if (s == null) {
            return "null";
        }
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static boolean caughtUp(KafkaConsumer<String, String> c, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (c.position(e.getKey()) < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 6 || args.length > 7 || !(args[0].equals("follow") || args[0].equals("resume"))) {
            System.err.println("usage: FollowGroup follow|resume BOOTSTRAP TOPIC GROUP COMMIT_MS TIMEOUT_MS [classic|consumer]");
            System.exit(2);
        }
        boolean follow = args[0].equals("follow");
        String topic = args[2];
        long timeoutMs = Long.parseLong(args[5]);
        PrintStream out = new PrintStream(
            new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16), false,
            StandardCharsets.UTF_8);

        Properties p = new Properties();
        p.put("bootstrap.servers", args[1]);
        p.put("group.id", args[3]);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", follow ? "true" : "false");
        p.put("auto.commit.interval.ms", args[4]);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        if (args.length == 7) {
            p.put("group.protocol", args[6]);
        }
        long n = 0;
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            if (!follow) {
                out.println("{\"ready\":" + System.currentTimeMillis() + "}");
                out.flush();
                BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
                if (in.readLine() == null) {
                    return;
                }
                out.println("{\"go\":" + System.currentTimeMillis() + "}");
                out.flush();
            }
            c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {}

                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    StringBuilder b = new StringBuilder("{\"assigned\":[");
                    String sep = "";
                    for (TopicPartition tp : parts) {
                        b.append(sep).append(tp.partition());
                        sep = ",";
                    }
                    out.println(b.append("]}"));
                    out.flush();
                }
            });
            long deadline = System.currentTimeMillis() + timeoutMs;
            Map<TopicPartition, Long> end = null;
            while (System.currentTimeMillis() < deadline) {
                var records = c.poll(Duration.ofMillis(100));
                long t = System.currentTimeMillis();
                for (ConsumerRecord<String, String> r : records) {
                    out.println("{\"p\":" + r.partition() + ",\"o\":" + r.offset() + ",\"k\":"
                        + quoted(r.key()) + ",\"t\":" + t + "}");
                    n++;
                }
                out.flush();
                Set<TopicPartition> assigned = c.assignment();
                if (!follow && !assigned.isEmpty()) {
                    if (end == null || !end.keySet().equals(assigned)) {
                        end = c.endOffsets(assigned);
                    }
                    if (caughtUp(c, end)) {
                        break;
                    }
                }
            }
            if (!follow) {
                c.commitSync();
            }
        }
        out.println("{\"done\":" + n + "}");
        out.flush();
    }
}
