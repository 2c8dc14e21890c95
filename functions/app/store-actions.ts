// `tollgate store acknowledge`: the operator's word that the counter store lost state and counting may go on
// against what is left (docs/OPERATIONS.md). Every hash slot without its epoch key gets it back (the store
// initialised, if it never was), so the calls that paused under `onStoreLoss: pause` count again.
import type { S3Client } from "@aws-sdk/client-s3";
import type { Cluster } from "ioredis";
import { RedisStoreEpochSlots } from "../adapters/redis-store-epoch.ts";
import { S3ObjectStore } from "../adapters/s3-object-store.ts";
import { type Clock, systemClock } from "../core/shared/clock.ts";
import { initialiseStore, type StoreInitialisation } from "../core/shared/store-epoch.ts";

export function acknowledgeStoreLoss(
  s3: S3Client,
  bucket: string,
  cluster: Cluster,
  namespace: string,
  clock: Clock = systemClock,
): Promise<StoreInitialisation> {
  return initialiseStore(new S3ObjectStore(s3, bucket), new RedisStoreEpochSlots(cluster), namespace, clock);
}
