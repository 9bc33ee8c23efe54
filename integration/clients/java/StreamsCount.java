// A Kafka Streams application with processing.guarantee=exactly_once_v2 for the integration tests
// (run in source-file mode: `integration/rig java integration/clients/java/StreamsCount.java
// ARGS`; the rig puts kafka-streams and its RocksDB on the classpath).
//
// Args: BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR EXPECTED TIMEOUT_MS [ID_PREFIX]
// Reads INPUT (String key, String value: the input record's id), keeps a count per key in the
// persistent store "counts" (changelog topic APPLICATION_ID-counts-changelog) and writes
// key -> "<id>:<count>" to OUTPUT, one output record per input record. Internal topics are
// created with replication factor 1 (the test clusters' source has one broker); commits every
// 100 ms. It runs until it has processed EXPECTED distinct input ids (when ID_PREFIX is given,
// only the ids starting with it count; it processes the others too) or TIMEOUT_MS passed, then
// waits (within TIMEOUT_MS too) until a read_committed reader of OUTPUT has an output of every id
// that counted: a transaction that failed after its records were processed (the first one after a
// switchover, whose transactional id the destination's coordinator does not know) is processed
// again by Streams before its outputs exist, and an application that stopped at once would leave
// them unwritten. Then it closes cleanly (which commits the open transaction) and prints one JSON
// line per processed record {"id":I,"key":K,"count":C} and at the end
// {"done":true,"distinct":D,"counted":N,"records":R,"reached":true|false,"committed":true|false,
// "closed":true|false}.
// Exit status: 0 after a clean close, 1 when a stream thread died of an exception (printed on
// stderr and as {"error":...}), 3 when the close did not finish within 60 s. With the environment
// variable STREAMS_REPLACE_THREAD=1 the uncaught exception handler answers REPLACE_THREAD (what a
// production application sets): Streams starts a new stream thread in place of one that died,
// each such exception is printed as {"replaced_thread":...}, and it is not a failure.
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

public class StreamsCount {
    static final String STORE = "counts";
    static final Set<String> DISTINCT = ConcurrentHashMap.newKeySet();
    /** The distinct ids that count towards EXPECTED (those starting with ID_PREFIX). */
    static final Set<String> COUNTED = ConcurrentHashMap.newKeySet();
    static volatile String prefix = "";
    static final AtomicLong RECORDS = new AtomicLong();

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

    static class Count implements Processor<String, String, String, String> {
        private ProcessorContext<String, String> context;
        private KeyValueStore<String, Long> counts;

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.context = context;
            this.counts = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, String> record) {
            Long before = counts.get(record.key());
            long count = (before == null ? 0 : before) + 1;
            counts.put(record.key(), count);
            context.forward(record.withValue(record.value() + ":" + count));
            RECORDS.incrementAndGet();
            DISTINCT.add(record.value());
            if (record.value() != null && record.value().startsWith(prefix)) {
                COUNTED.add(record.value());
            }
            synchronized (System.out) {
                System.out.println("{\"id\":" + json(record.value()) + ",\"key\":" + json(record.key())
                    + ",\"count\":" + count + "}");
            }
        }
    }

    /** Whether a read_committed reader of OUTPUT has an output ("ID:COUNT") of every id in
     * COUNTED before DEADLINE_MS. */
    static boolean outputsCommitted(String bootstrap, String output, long deadlineMs) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        Set<String> seen = new HashSet<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo pi : consumer.partitionsFor(output, Duration.ofSeconds(30))) {
                parts.add(new TopicPartition(output, pi.partition()));
            }
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            while (System.currentTimeMillis() < deadlineMs) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    String v = r.value();
                    int colon = v == null ? -1 : v.lastIndexOf(':');
                    if (colon > 0) {
                        seen.add(v.substring(0, colon));
                    }
                }
                if (seen.containsAll(COUNTED)) {
                    return true;
                }
            }
        } catch (RuntimeException e) {
            System.err.println("reading the committed output: " + e);
        }
        return false;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 7 && args.length != 8) {
            System.err.println("usage: StreamsCount BOOTSTRAP APPLICATION_ID INPUT OUTPUT STATE_DIR EXPECTED TIMEOUT_MS [ID_PREFIX]");
            System.exit(2);
        }
        String input = args[2];
        String output = args[3];
        int expected = Integer.parseInt(args[5]);
        long timeoutMs = Long.parseLong(args[6]);
        if (args.length == 8) {
            prefix = args[7];
        }

        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "100");
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, "1");
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

        StreamsBuilder builder = new StreamsBuilder();
        builder.addStateStore(Stores.keyValueStoreBuilder(
            Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.Long()));
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .process(Count::new, STORE)
            .to(output, Produced.with(Serdes.String(), Serdes.String()));

        AtomicReference<Throwable> failure = new AtomicReference<>();
        List<String> replaced = java.util.Collections.synchronizedList(new ArrayList<>());
        boolean replaceThread = "1".equals(System.getenv("STREAMS_REPLACE_THREAD"));
        KafkaStreams streams = new KafkaStreams(builder.build(), p);
        streams.setUncaughtExceptionHandler(e -> {
            if (replaceThread) {
                replaced.add(e.toString() + (e.getCause() != null ? " caused by " + e.getCause() : ""));
                return StreamThreadExceptionResponse.REPLACE_THREAD;
            }
            failure.compareAndSet(null, e);
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (COUNTED.size() < expected && failure.get() == null
            && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
        boolean reached = COUNTED.size() >= expected;
        boolean committed = reached && failure.get() == null
            && outputsCommitted(args[0], output, deadline);
        boolean closed = streams.close(Duration.ofSeconds(60));
        Throwable f = failure.get();
        synchronized (System.out) {
            if (f != null) {
                System.out.println("{\"error\":" + json(f.toString()) + "}");
            }
            for (String r : replaced) {
                System.out.println("{\"replaced_thread\":" + json(r) + "}");
            }
            System.out.println("{\"done\":true,\"distinct\":" + DISTINCT.size() + ",\"counted\":" + COUNTED.size()
                + ",\"records\":" + RECORDS.get()
                + ",\"reached\":" + reached + ",\"committed\":" + committed
                + ",\"closed\":" + closed + "}");
            System.out.flush();
        }
        if (f != null) {
            f.printStackTrace();
            System.exit(1);
        }
        System.exit(closed ? 0 : 3);
    }
}
