// Validity by this process's own clock (performance.now(), monotonic, in milliseconds).
import { performance } from "node:perf_hooks";

/** This process's monotonic clock, in milliseconds. */
export const now = (): number => performance.now();

/**
 * Until when a message received at `received` vouches for a lease or a leadership: validForMs
 * from its receipt, and never past validToMs after `opened` (just before the client opened the
 * message's stream; the server counts validToMs from its receipt of the stream, which is later).
 * That bound still holds for a message held up on its way (a partition that heals delivers old
 * messages late). validToMs 0: a server that predates it, so receipt alone counts. Never past
 * `ceiling` either (a hold's max hold, `ceilingOf`), whatever the server says.
 */
export function vouchedUntil(opened: number, received: number, validForMs: number, validToMs: bigint, ceiling = Infinity): number {
  const until = Math.min(received + validForMs, ceiling);
  if (validToMs === 0n) return until;
  return Math.min(until, opened + Number(validToMs));
}

/** The end of a hold taken with `maxHoldMs` (0: none, Infinity) by an acquire sent at `sent`:
 * the server counts its ceiling from its receipt of the acquire, which is later, so this
 * process's belief never outlives the server's ceiling. */
export function ceilingOf(sent: number, maxHoldMs: number): number {
  return maxHoldMs > 0 ? sent + maxHoldMs : Infinity;
}

/** A fencing token (uint64, below 2^53 by the contract) as a number. */
export function tokenNumber(value: bigint): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new RangeError(`fencing token ${value} is above 2^53`);
  return n;
}

/** A random wait between half the delay and the delay. */
export const jitter = (delay: number): number => delay / 2 + Math.random() * (delay / 2);

export const FIRST_BACKOFF_MS = 20;
export const MAX_BACKOFF_MS = 500;
export const RELEASE_TIMEOUT_MS = 10_000;
export const SILENT = "no renewal confirmed before the lease ran out (server silent)";
export const MAX_HOLD = "it reached its max hold: stop work now";
