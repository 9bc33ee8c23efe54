// A Kafka Java transactional producer for the integration tests and the mirror benchmark (run in
// source-file mode: `integration/rig java integration/clients/java/TxnProducer.java ARGS`).
//
// Args: BOOTSTRAP TOPIC PARTITIONS TRANSACTIONAL_ID PLAN [RECORD_BYTES]
// PLAN is a comma-separated list of transactions, each a letter and a count:
//   cN  a transaction of N records per partition (0..PARTITIONS-1), committed;
//   aN  the same, aborted;
//   oN  the same, left open: the records are flushed, then the process halts without ending the
//       transaction (the coordinator aborts it after transaction.timeout.ms, 10 minutes here).
// Record values are "<transactional id>-t<transaction>-p<partition>-r<record>-<c|a|o>", padded
// with '.' to RECORD_BYTES when given; keys are "k<record>". Prints one JSON line per
// transaction {"txn":I,"end":"commit|abort|open","records":N} and, unless a transaction was left
// open, {"done":true,"committed":C,"aborted":A} at the end.
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnProducer {
    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: TxnProducer BOOTSTRAP TOPIC PARTITIONS TRANSACTIONAL_ID PLAN [RECORD_BYTES]");
            System.exit(2);
        }
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        String txid = args[3];
        int pad = args.length > 5 ? Integer.parseInt(args[5]) : 0;
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("transactional.id", txid);
        p.put("transaction.timeout.ms", "600000");
        p.put("acks", "all");
        p.put("linger.ms", "5");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        long committed = 0;
        long aborted = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            String[] plan = args[4].split(",");
            for (int t = 0; t < plan.length; t++) {
                char end = plan[t].charAt(0);
                int n = Integer.parseInt(plan[t].substring(1));
                producer.beginTransaction();
                for (int r = 0; r < n; r++) {
                    for (int part = 0; part < partitions; part++) {
                        StringBuilder v = new StringBuilder(txid + "-t" + t + "-p" + part + "-r" + r + "-" + end);
                        while (v.length() < pad) {
                            v.append('.');
                        }
                        producer.send(new ProducerRecord<>(topic, part, "k" + r, v.toString()));
                    }
                }
                long records = (long) n * partitions;
                switch (end) {
                    case 'c':
                        producer.commitTransaction();
                        committed += records;
                        System.out.println("{\"txn\":" + t + ",\"end\":\"commit\",\"records\":" + records + "}");
                        break;
                    case 'a':
                        producer.flush();
                        producer.abortTransaction();
                        aborted += records;
                        System.out.println("{\"txn\":" + t + ",\"end\":\"abort\",\"records\":" + records + "}");
                        break;
                    case 'o':
                        producer.flush();
                        System.out.println("{\"txn\":" + t + ",\"end\":\"open\",\"records\":" + records + "}");
                        System.out.flush();
                        Runtime.getRuntime().halt(0);
                        break;
                    default:
                        throw new IllegalArgumentException("unknown transaction end '" + end + "' in " + plan[t]);
                }
            }
        }
        System.out.println("{\"done\":true,\"committed\":" + committed + ",\"aborted\":" + aborted + "}");
    }
}
