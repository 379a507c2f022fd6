// Leasehold for Node.js: distributed locks held by one gRPC stream.
export { Client, connect, type HeldLock, type HolderInfo, type Listing, type LockState } from "./client.js";
export { Lease, type LeaseOptions, type WaitingInfo } from "./lease.js";
export { Candidate, type CampaignOptions, type Leader } from "./election.js";
export { Session, SessionLease, SessionLeader, type SessionLockOptions, type SessionOptions } from "./session.js";
export {
  Code,
  ERROR_DOMAIN,
  LeaseLostError,
  LeaseholdError,
  NotAcquiredError,
  SessionClosedError,
  StaleError,
} from "./errors.js";
export type { ConnectOptions, TlsOptions } from "./transport.js";
