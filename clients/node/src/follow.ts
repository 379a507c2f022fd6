// Following a server stream of states (an election's leader, a lock's state): the first state,
// then every change, followed again on the next replica when the stream breaks, never the same
// state twice in a row.
import { create, fromBinary, toBinary, type DescMessage, type DescMethod, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { Code, LeaseholdError, toError, transient } from "./errors.js";
import type { Replicas } from "./transport.js";
import { FIRST_BACKOFF_MS, MAX_BACKOFF_MS, jitter } from "./validity.js";

/**
 * The states `method` streams for `request`, as `state` reads them, until `signal` aborts or the
 * caller leaves its `for await` loop (either cancels the call). `key` says when two states are
 * the same: a resumed stream starts with the state the broken one last sent, which is not
 * reported again. A refusal is thrown, and so is a break before the first state once every
 * replica was tried.
 */
export async function* follow<I extends DescMessage, O extends DescMessage, T>(
  replicas: Replicas,
  method: DescMethod & { input: I; output: O },
  request: MessageInitShape<I>,
  state: (message: MessageShape<O>) => T,
  key: (state: T) => string,
  signal?: AbortSignal,
): AsyncGenerator<T, void, undefined> {
  const message = create(method.input, request);
  let last: string | undefined;
  let delay = FIRST_BACKOFF_MS;
  let tried = 0;
  while (!signal?.aborted) {
    const index = replicas.current;
    const call = replicas.channel(index).makeServerStreamRequest(
      `/${method.parent.typeName}/${method.name}`,
      (m: MessageShape<I>) => Buffer.from(toBinary(method.input, m)),
      (b: Buffer) => fromBinary(method.output, b),
      message,
      replicas.metadata(),
    );
    const onAbort = () => call.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const received of call as AsyncIterable<MessageShape<O>>) {
        delay = FIRST_BACKOFF_MS;
        const now = state(received);
        const k = key(now);
        if (k !== last) {
          last = k;
          yield now;
        }
      }
      return;
    } catch (raw) {
      if (signal?.aborted) return;
      const error = toError(raw);
      const resumable = transient(error) && !(error instanceof LeaseholdError && error.code === Code.CANCELLED);
      const unreachable = error instanceof LeaseholdError && error.code === Code.UNAVAILABLE;
      if (!resumable || (last === undefined && !(unreachable && ++tried < replicas.addresses.length))) throw error;
      replicas.failover(index);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      call.cancel();
    }
    await new Promise((resolve) => setTimeout(resolve, jitter(delay)));
    delay = Math.min(2 * delay, MAX_BACKOFF_MS);
  }
}
