package changelake.endpoint;

import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.spark.SparkContext;
import org.apache.thrift.protocol.TProtocol;
import org.apache.thrift.server.ServerContext;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TServerEventHandler;
import org.apache.thrift.transport.TSocket;
import org.apache.thrift.transport.TTransport;
import scala.collection.Seq;
import scala.concurrent.Await;
import scala.concurrent.duration.Duration;

/**
 * Cancels the Spark jobs of a Thrift client that went away mid-statement.
 *
 * <p>The endpoint runs statements synchronously (one handler thread per connection executes the statement
 * while the client waits for the answer): HiveServer2 closes a dropped client's session only when that thread
 * next reads from the socket, i.e. after the statement has run to its end or its timeout. This event handler
 * wraps HiveServer2's own: it tags the jobs of each connection (a job tag on the connection's handler thread,
 * which Spark copies into every job the statement starts) and a watchdog thread cancels the tagged jobs of any
 * connection whose TCP peer has closed, about once a second, until HiveServer2 has closed the session.
 *
 * <p>A closed peer is read from the kernel's socket table ({@code /proc/net/tcp6}, {@code /proc/net/tcp}: the
 * connection no longer ESTABLISHED): nothing is read from or written to the client's socket, which belongs
 * to its handler thread. Where there is no such table, nothing is cancelled and the statement timeout bounds
 * the statement.
 */
public final class Disconnects implements TServerEventHandler {
  private static final String TAG = "changelake-thrift-connection-";
  private static final long PERIOD_MS = 500;
  private static final AtomicLong NEXT = new AtomicLong();

  private final TServerEventHandler hive;
  private final SparkContext context;
  private final Map<ServerContext, Connection> connections = new ConcurrentHashMap<>();

  /** One client connection: its socket's ports and the tag of its jobs. */
  private static final class Connection {
    final String tag = TAG + NEXT.incrementAndGet();
    volatile String ports;  // "local:remote" in hex, as the kernel's table writes them; null until known
    volatile boolean reported;
  }

  private Disconnects(TServerEventHandler hive, SparkContext context) {
    this.hive = hive;
    this.context = context;
  }

  /**
   * Wrap the event handler of the binary Thrift server of {@code hiveServer} (a started HiveThriftServer2) and
   * start the watchdog; connections opened from now on are watched. Returns false if the server is not the
   * binary transport (HTTP mode has no connection per session).
   */
  public static boolean install(Object hiveServer, SparkContext context) throws ReflectiveOperationException {
    Method services = hiveServer.getClass().getMethod("getServices");
    for (Object service : (Iterable<?>) services.invoke(hiveServer)) {
      if (!"ThriftBinaryCLIService".equals(service.getClass().getSimpleName())) {
        continue;
      }
      Field field = service.getClass().getDeclaredField("server");
      field.setAccessible(true);
      TServer server = (TServer) field.get(service);
      Disconnects handler = new Disconnects(server.getEventHandler(), context);
      server.setServerEventHandler(handler);
      Thread watchdog = new Thread(handler::watch, "changelake-thrift-disconnects");
      watchdog.setDaemon(true);
      watchdog.start();
      return true;
    }
    return false;
  }

  @Override
  public void preServe() {
    if (hive != null) {
      hive.preServe();
    }
  }

  @Override
  public ServerContext createContext(TProtocol input, TProtocol output) {
    ServerContext server = hive == null ? null : hive.createContext(input, output);
    if (server != null) {
      connections.put(server, new Connection());
    }
    return server;
  }

  @Override
  public void processContext(ServerContext server, TTransport input, TTransport output) {
    if (hive != null) {
      hive.processContext(server, input, output);
    }
    Connection connection = server == null ? null : connections.get(server);
    if (connection == null) {
      return;
    }
    if (connection.ports == null) {
      Socket socket = socket(input);
      if (socket != null) {
        connection.ports = String.format("%04X:%04X", socket.getLocalPort(), socket.getPort());
      }
    }
    // Handler threads are pooled: the tags of the connection this thread served before go.
    context.clearJobTags();
    context.addJobTag(connection.tag);
  }

  @Override
  public void deleteContext(ServerContext server, TProtocol input, TProtocol output) {
    if (server != null) {
      connections.remove(server);
    }
    context.clearJobTags();
    if (hive != null) {
      hive.deleteContext(server, input, output);
    }
  }

  private void watch() {
    while (!context.isStopped()) {
      try {
        Thread.sleep(PERIOD_MS);
        if (connections.isEmpty()) {
          continue;
        }
        Set<String> established = established();
        if (established == null) {
          continue;  // no socket table to read: the statement timeout bounds a dropped client's statement
        }
        for (Connection connection : connections.values()) {
          if (connection.ports != null && !established.contains(connection.ports)) {
            // A client that closed between statements has no jobs: its handler thread ends the session itself.
            Seq<?> cancelled = Await.result(
                context.cancelJobsWithTagWithFuture(connection.tag, "the Thrift client disconnected"),
                Duration.create(10, TimeUnit.SECONDS));
            if (!cancelled.isEmpty() && !connection.reported) {
              connection.reported = true;
              System.err.println("[server] a Thrift client disconnected mid-statement: " + cancelled.size()
                  + " job(s) of its statement cancelled (" + connection.tag + ")");
            }
          }
        }
      } catch (InterruptedException e) {
        return;
      } catch (Exception e) {
        // a context stopping under us, a cancellation not answered in time: tried again next period
      }
    }
  }

  /** The "local:remote" ports (hex) of every ESTABLISHED TCP connection, or null without a readable table. */
  private static Set<String> established() {
    Set<String> found = new HashSet<>();
    boolean read = false;
    for (String table : new String[] {"/proc/net/tcp6", "/proc/net/tcp"}) {
      try {
        for (String line : Files.readAllLines(Paths.get(table), StandardCharsets.US_ASCII)) {
          String[] fields = line.trim().split("\\s+");
          // sl local_address rem_address st ...: addresses are HEXADDR:HEXPORT, 01 is ESTABLISHED
          if (fields.length > 3 && "01".equals(fields[3])) {
            found.add(port(fields[1]) + ":" + port(fields[2]));
          }
        }
        read = true;
      } catch (IOException | RuntimeException e) {
        // this address family's table is missing: the other one may do
      }
    }
    return read ? found : null;
  }

  private static String port(String address) {
    return address.substring(address.lastIndexOf(':') + 1);
  }

  /** The client's socket under the (SASL) transports Thrift wraps it in, or null. */
  private static Socket socket(TTransport transport) {
    Object current = transport;
    for (int depth = 0; depth < 4 && current != null; depth++) {
      if (current instanceof TSocket) {
        return ((TSocket) current).getSocket();
      }
      try {
        Method under = current.getClass().getMethod("getUnderlyingTransport");
        current = under.invoke(current);
      } catch (ReflectiveOperationException | RuntimeException e) {
        return null;
      }
    }
    return null;
  }
}
