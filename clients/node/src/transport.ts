// The transport: @grpc/grpc-js channels, one per replica address, carrying protobuf-es messages
// (generated at build time from ../../proto). Calls go to one replica at a time; when it fails
// (connection refused, the stream broke) the caller moves to the next with `failover`.
import { fromBinary, toBinary, type DescMessage, type DescMethod, type MessageShape } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { Code, toError } from "./errors.js";
import { now } from "./validity.js";

/** TLS settings: PEM buffers. `true` means TLS with the system's roots. */
export interface TlsOptions {
  /** Root certificates (PEM) to trust for the server's certificate; default: the system's. */
  ca?: Buffer | string;
  /** A client certificate (PEM) and its key, for mutual TLS. */
  cert?: Buffer | string;
  key?: Buffer | string;
  /** The name to check the server's certificate against, when it is not the address's host. */
  servername?: string;
}

export interface ConnectOptions {
  /** Sent with every call as `authorization: Bearer <token>` (the server's --auth-file). */
  token?: string;
  /** TLS: true (system roots) or certificates. Also on for an `https://` target. */
  tls?: boolean | TlsOptions;
  /** Extra grpc-js channel options. */
  channelOptions?: grpc.ChannelOptions;
}

const pem = (value: Buffer | string | undefined): Buffer | null =>
  value === undefined ? null : Buffer.isBuffer(value) ? value : Buffer.from(value);

/** The replicas a client talks to, in the order given: one channel each, made when first used. */
export class Replicas {
  readonly addresses: string[];
  private readonly channels: (grpc.Client | undefined)[];
  private readonly credentials: grpc.ChannelCredentials;
  private readonly options: grpc.ChannelOptions;
  private readonly token: string | undefined;
  private readonly servername: string | undefined;
  /** The replica new calls go to. */
  current = 0;

  constructor(target: string, opts: ConnectOptions = {}) {
    let tls = opts.tls;
    const addresses: string[] = [];
    for (let address of target.split(",")) {
      address = address.trim();
      if (address.startsWith("https://")) {
        address = address.slice("https://".length);
        tls ??= true;
      }
      address = address.replace(/^http:\/\//, "").replace(/\/+$/, "");
      if (address !== "") addresses.push(address);
    }
    if (addresses.length === 0) throw new Error("leasehold: no server address given");
    this.addresses = addresses;
    this.channels = addresses.map(() => undefined);
    if (tls) {
      const t: TlsOptions = tls === true ? {} : tls;
      this.credentials = grpc.credentials.createSsl(pem(t.ca), pem(t.key), pem(t.cert));
      this.servername = t.servername;
    } else {
      this.credentials = grpc.credentials.createInsecure();
    }
    this.token = opts.token;
    this.options = {
      // Reconnect soon after a server comes back (a rolling restart), so that a lease can be
      // resumed within its validity.
      "grpc.initial_reconnect_backoff_ms": 100,
      "grpc.min_reconnect_backoff_ms": 100,
      "grpc.max_reconnect_backoff_ms": 1000,
      "grpc.enable_retries": 0,
      ...(this.servername ? { "grpc.ssl_target_name_override": this.servername } : {}),
      ...opts.channelOptions,
    };
  }

  /** The channel of replica `index`. */
  channel(index: number): grpc.Client {
    let channel = this.channels[index];
    if (channel === undefined) {
      channel = new grpc.Client(this.addresses[index]!, this.credentials, this.options);
      this.channels[index] = channel;
    }
    return channel;
  }

  /** Moves new calls off replica `index` (if they still go there) to the next one. */
  failover(index: number): void {
    if (this.current === index) this.current = (index + 1) % this.addresses.length;
  }

  metadata(): grpc.Metadata {
    const metadata = new grpc.Metadata();
    if (this.token !== undefined) metadata.set("authorization", `Bearer ${this.token}`);
    return metadata;
  }

  close(): void {
    for (const channel of this.channels) channel?.close();
    this.channels.fill(undefined);
  }

  /** A unary call on the current replica, moving on to the next while one is unreachable
   * (UNAVAILABLE) until each was tried. `signal` cancels it (rejecting with its reason). */
  async unary<I extends DescMessage, O extends DescMessage>(
    method: DescMethod & { input: I; output: O },
    request: MessageShape<I>,
    { timeoutMs = 10_000, signal }: { timeoutMs?: number; signal?: AbortSignal | undefined } = {},
  ): Promise<MessageShape<O>> {
    let last: Error | undefined;
    for (let tried = 0; tried < this.addresses.length; tried++) {
      signal?.throwIfAborted();
      const index = this.current;
      let onAbort: (() => void) | undefined;
      try {
        return await new Promise<MessageShape<O>>((resolve, reject) => {
          const call = this.channel(index).makeUnaryRequest(
            path(method),
            (m: MessageShape<I>) => Buffer.from(toBinary(method.input, m)),
            (b: Buffer) => fromBinary(method.output, b),
            request,
            this.metadata(),
            { deadline: Date.now() + timeoutMs },
            (error, answer) => (error || answer === undefined ? reject(toError(error)) : resolve(answer)),
          );
          onAbort = () => {
            reject(signal!.reason);
            call.cancel();
          };
          signal?.addEventListener("abort", onAbort, { once: true });
        });
      } catch (error) {
        last = error as Error;
        if (signal?.aborted || (error as { code?: number }).code !== Code.UNAVAILABLE) throw error;
        this.failover(index);
      } finally {
        if (onAbort) signal?.removeEventListener("abort", onAbort);
      }
    }
    throw last;
  }
}

function path(method: DescMethod): string {
  return `/${method.parent.typeName}/${method.name}`;
}

/** One bidirectional stream on one replica: messages to `onMessage`, then exactly one call of
 * `onEnd` (null: the server ended it with OK; else the status as an error). */
export class Stream<I extends DescMessage, O extends DescMessage> {
  /** The replica it is on. */
  readonly index: number;
  /** Just before the stream was opened, on this process's clock: what valid_to_ms counts from. */
  readonly opened: number;
  private readonly call: grpc.ClientDuplexStream<MessageShape<I>, MessageShape<O>>;
  private writable = true;
  private finished = false;

  constructor(
    replicas: Replicas,
    method: DescMethod & { input: I; output: O },
    onMessage: (message: MessageShape<O>) => void,
    onEnd: (error: Error | null) => void,
    index = replicas.current,
  ) {
    this.index = index;
    this.opened = now();
    this.call = replicas.channel(index).makeBidiStreamRequest(
      path(method),
      (m: MessageShape<I>) => Buffer.from(toBinary(method.input, m)),
      (b: Buffer) => fromBinary(method.output, b),
      replicas.metadata(),
    );
    let status: grpc.StatusObject | undefined;
    let ended = false;
    const finish = () => {
      if (this.finished || status === undefined) return;
      this.finished = true;
      this.writable = false;
      onEnd(status.code === Code.OK ? null : toError({ ...status, message: status.details }));
    };
    this.call.on("data", (message: MessageShape<O>) => {
      if (!this.finished) onMessage(message);
    });
    this.call.on("error", () => {}); // the status says it all
    this.call.on("end", () => {
      ended = true;
      finish();
    });
    this.call.on("status", (s: grpc.StatusObject) => {
      status = s;
      if (ended) finish();
      // Messages still buffered are delivered before `end`; without one, end it anyway.
      setTimeout(finish, 50).unref();
    });
  }

  send(message: MessageShape<I>): void {
    if (this.writable) this.call.write(message);
  }

  /** Half-closes the client's side. */
  end(): void {
    if (this.writable) {
      this.writable = false;
      this.call.end();
    }
  }

  cancel(): void {
    this.writable = false;
    if (!this.finished) this.call.cancel();
  }

  get done(): boolean {
    return this.finished;
  }
}
