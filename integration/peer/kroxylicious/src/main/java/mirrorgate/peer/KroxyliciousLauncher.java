package mirrorgate.peer;

import java.nio.file.Files;
import java.nio.file.Path;

import io.kroxylicious.proxy.KafkaProxy;
import io.kroxylicious.proxy.config.ConfigParser;
import io.kroxylicious.proxy.config.Configuration;
import io.kroxylicious.proxy.internal.config.Features;

/**
 * Runs a Kroxylicious proxy from a YAML configuration file (the only argument) until the
 * process is killed. Stands in for kroxylicious-app's launcher, which the benchmark cannot
 * download here; no filters are configured, so the proxy only forwards and rewrites addresses.
 */
public final class KroxyliciousLauncher {
    private KroxyliciousLauncher() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: KroxyliciousLauncher CONFIG.yaml");
            System.exit(2);
        }
        ConfigParser parser = new ConfigParser();
        Configuration config = parser.parseConfiguration(Files.readString(Path.of(args[0])));
        try (KafkaProxy proxy = new KafkaProxy(parser, config, Features.defaultFeatures())) {
            proxy.startup();
            proxy.block();
        }
    }
}
