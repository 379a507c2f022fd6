// Leasehold for Node.js: distributed locks held by one gRPC stream.
export {
  Client,
  connect,
  type CheckOptions,
  type TokenCheck,
  type TokenState,
  type HeldLock,
  type HolderInfo,
  type Listing,
  type LockState,
  type RevokeLeaderOptions,
  type RevokeOptions,
  type WatchOptions,
} from "./client.js";
export { Lease, type LeaseOptions, type WaitingInfo } from "./lease.js";
export type { Fences } from "./fences.js";
export { Candidate, type CampaignOptions, type Leader } from "./election.js";
export { Session, type SessionLockOptions, type SessionOptions } from "./session.js";
export { SessionLease, SessionLeader } from "./session_leases.js";
export {
  Code,
  ERROR_DOMAIN,
  LeaseLostError,
  LeaseholdError,
  NotAcquiredError,
  SessionClosedError,
  StaleError,
  type LostReason,
} from "./errors.js";
export type { ConnectOptions, TlsOptions } from "./transport.js";
