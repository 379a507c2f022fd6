// Several names held at once (all or none): what a lease asks for on the wire, and each name's
// fencing token as the server answers it. One place for the lease and the session's leases.
import { tokenNumber } from "./validity.js";

/** Each name's fencing token, in the order the names were asked for (a Map keeps that order):
 * `name` first, then `names`. */
export type Fences = ReadonlyMap<string, number>;

/** The names as the wire carries them: `name` = the first, `more_names` = the rest. */
export function wireNames(name: string, names: readonly string[] | undefined): { name: string; moreNames: string[] } {
  return { name, moreNames: [...(names ?? [])] };
}

/**
 * Each name's fencing token from an `acquired`, or why it cannot be believed (a string). Its
 * `fences` must name exactly the names asked for, in their order, the first with `fencingToken`;
 * none at all only from a server that predates several names, which is believed for one name
 * alone: one that ignored `more_names` holds only the first, and the caller would believe it
 * holds them all.
 */
export function readFences(
  asked: readonly string[],
  fences: readonly { name: string; fencingToken: bigint }[],
  fencingToken: bigint,
): Fences | string {
  if (fences.length === 0) {
    if (asked.length === 1) return new Map([[asked[0]!, tokenNumber(fencingToken)]]);
    return `the server answered no fencing token per name for ${asked.join(", ")} (it predates several names at once)`;
  }
  const answered = fences.map((f) => f.name);
  if (answered.length !== asked.length || answered.some((n, i) => n !== asked[i])) {
    return `the server answered fencing tokens for ${answered.join(", ")}, not for the names asked (${asked.join(", ")})`;
  }
  if (fences[0]!.fencingToken !== fencingToken) {
    return `the server answered fencing token ${fences[0]!.fencingToken} for ${asked[0]}, and ${fencingToken} as the lease's`;
  }
  return new Map(fences.map((f) => [f.name, tokenNumber(f.fencingToken)]));
}

/** Whether two answers give every name the same fencing token (a resume must). */
export function sameFences(a: Fences, b: Fences): boolean {
  if (a.size !== b.size) return false;
  for (const [name, token] of a) if (b.get(name) !== token) return false;
  return true;
}
