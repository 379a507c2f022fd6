// node-redlock 5's types exist but its package.json "exports" hides them from NodeNext
// resolution: the part of its API the bench uses.
declare module "redlock" {
  import type { Redis } from "ioredis";
  export interface Lock {
    release(): Promise<unknown>;
  }
  export interface Settings {
    driftFactor?: number;
    retryCount?: number;
    retryDelay?: number;
    retryJitter?: number;
  }
  export default class Redlock {
    constructor(clients: Iterable<Redis>, settings?: Settings);
    acquire(resources: string[], duration: number): Promise<Lock>;
  }
}
