package dev.leasehold;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP proxy in front of the server whose connections can all be cut at once, as a network
 * break would: the server sees its connection end with no gRPC goodbye.
 */
final class CuttableProxy implements AutoCloseable {
  final String target;
  private final ServerSocket listener;
  private final List<Socket> sockets = new CopyOnWriteArrayList<>();

  CuttableProxy(String upstream) throws IOException {
    int colon = upstream.lastIndexOf(':');
    String host = upstream.substring(0, colon);
    int port = Integer.parseInt(upstream.substring(colon + 1));
    listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    target = "127.0.0.1:" + listener.getLocalPort();
    Thread accept = new Thread(() -> {
      while (true) {
        try {
          Socket client = listener.accept();
          Socket server = new Socket(host, port);
          sockets.add(client);
          sockets.add(server);
          pipe(client, server);
          pipe(server, client);
        } catch (IOException e) {
          return; // cut
        }
      }
    });
    accept.setDaemon(true);
    accept.start();
  }

  private static void pipe(Socket from, Socket to) {
    Thread thread = new Thread(() -> {
      byte[] buffer = new byte[65536];
      try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
        int read;
        while ((read = in.read(buffer)) >= 0) {
          out.write(buffer, 0, read);
        }
      } catch (IOException e) {
        // cut
      }
    });
    thread.setDaemon(true);
    thread.start();
  }

  /** Closes every connection through the proxy and refuses new ones. */
  void cut() throws IOException {
    listener.close();
    for (Socket socket : sockets) {
      socket.close();
    }
    sockets.clear();
  }

  @Override
  public void close() throws IOException {
    cut();
  }
}
