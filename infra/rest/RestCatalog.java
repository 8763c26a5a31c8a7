// Iceberg's REST catalog server (RESTCatalogServlet over a RESTCatalogAdapter, the classes of Iceberg's own
// REST fixture) on loopback only, answering only requests that carry the bearer token generated at start.
// Iceberg's RESTCatalogServer listens on every interface without authentication; this launcher is that server
// with those two things changed. The backend catalog is configured as the fixture's is: CATALOG_* environment
// variables become catalog properties (CATALOG_URI -> uri, CATALOG_S3_PATH__STYLE__ACCESS -> s3.path-style-access).
// Argument: the port; the token is read from REST_CATALOG_TOKEN (never printed).
import jakarta.servlet.http.HttpServletResponse;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.ee10.servlet.ServletContextHandler;
import org.eclipse.jetty.ee10.servlet.ServletHolder;
import org.eclipse.jetty.server.Handler;
import org.eclipse.jetty.server.Request;
import org.eclipse.jetty.server.Response;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.util.Callback;

public class RestCatalog {
  public static void main(String[] args) throws Exception {
    int port = Integer.parseInt(args[0]);
    String secret = System.getenv("REST_CATALOG_TOKEN");
    if (secret == null || secret.length() < 16) {
      throw new IllegalArgumentException("REST_CATALOG_TOKEN must hold a token of at least 16 characters");
    }
    byte[] expected = ("Bearer " + secret).getBytes(StandardCharsets.UTF_8);
    Map<String, String> properties = new HashMap<>();
    properties.put("catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog");
    properties.put("jdbc.schema-version", "V1");
    for (Map.Entry<String, String> e : System.getenv().entrySet()) {
      if (e.getKey().startsWith("CATALOG_")) {
        String name = e.getKey().substring("CATALOG_".length()).replace("__", "-").replace("_", ".");
        properties.put(name.toLowerCase(Locale.ROOT), e.getValue());
      }
    }
    Catalog catalog = CatalogUtil.buildIcebergCatalog("rest_backend", properties, null); // no Hadoop
    ServletContextHandler context = new ServletContextHandler();
    context.addServlet(new ServletHolder(new RESTCatalogServlet(new RESTCatalogAdapter(catalog))), "/*");
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost("127.0.0.1");
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(
        new Handler.Wrapper(context) {
          @Override
          public boolean handle(Request request, Response response, Callback callback) throws Exception {
            String given = request.getHeaders().get("Authorization");
            byte[] bytes = given == null ? new byte[0] : given.getBytes(StandardCharsets.UTF_8);
            if (!MessageDigest.isEqual(bytes, expected)) {
              Response.writeError(request, response, callback, HttpServletResponse.SC_UNAUTHORIZED);
              return true;
            }
            return super.handle(request, response, callback);
          }
        });
    server.start();
    System.out.println("REST catalog listening on http://127.0.0.1:" + connector.getLocalPort());
    server.join();
  }
}
