import { Registry } from '../util/index.js'
import type { SnapshotStore } from './snapshot-store.js'

export interface S3Credentials {
  accessKeyId: string
  secretAccessKey: string
  sessionToken?: string
}

/**
 * The S3 store's settings besides its bucket and prefix: what
 * openSnapshotStore takes as options.s3 next to an s3:// URL. The S3
 * connector's S3SnapshotStoreOptions adds the bucket and prefix.
 */
export interface S3StoreSettings {
  /** For MinIO, Ceph radosgw and other S3-compatible servers, e.g. 'http://127.0.0.1:9000'. */
  endpoint?: string
  /** Falls back to the SDK's chain (AWS_REGION, the shared config file) when absent. */
  region?: string
  /** Bucket in the path instead of the host name; most S3-compatible servers need it. */
  forcePathStyle?: boolean
  /** Falls back to the standard AWS credential chain (environment, shared files, SSO, instance roles) when absent. */
  credentials?: S3Credentials
  /** Attempts per request, the first included. */
  maxAttempts?: number
  /** The backoff before retry n is a random point in the upper half of min(retryMaxDelayMs, retryBaseDelayMs * 2^(n-1)). */
  retryBaseDelayMs?: number
  retryMaxDelayMs?: number
  /** Bodies larger than this go up in parts of this size; each part is buffered so a failed part can be sent again. */
  partSize?: number
  /** Parts in flight per put; memory use per put is about (uploadConcurrency + 1) * partSize. */
  uploadConcurrency?: number
  /**
   * Upload requests (PutObject, UploadPart) in flight at once across every
   * put of this store instance: all the partitions of a process that share
   * the store share these. Each holds one part buffer, so a process's upload
   * memory is about maxConcurrentUploads * partSize however many partitions
   * snapshot at once. A put of a body already in memory (a manifest, a claim)
   * takes no slot: its memory is spent, and a lease renewal must not queue
   * behind snapshot data.
   */
  maxConcurrentUploads?: number
  /**
   * GetObject requests in flight at once across every get of this store
   * instance (all restores of the process); a get holds its slot until its
   * body is read to the end or destroyed.
   */
  maxConcurrentDownloads?: number
  /** Keys per ListObjectsV2 request (S3 returns at most 1000). */
  listPageSize?: number
  connectTimeoutMs?: number
  /** A request, or a response body being read, that moves no byte for this long fails and is retried. */
  idleTimeoutMs?: number
  /** Set to false for servers that accept but ignore If-None-Match (s3rver), so callers do not fence on it. */
  conditionalPut?: boolean
}

/**
 * The snapshot stores that URL schemes other than file: open, by protocol
 * ('s3:'): registered by a connector's entry point when it is imported
 * (connectors/s3 registers 's3:'). openSnapshotStore parses the URL and
 * hands the options to the registered function.
 */
export const snapshotStoreSchemes = new Registry<(options: S3StoreSettings & { bucket: string; prefix: string }) => SnapshotStore>('snapshot store scheme')
