/**
 * The snapshot store layer's door for the connectors: the interface, its
 * abstract base and the helpers an implementation shares. The package's
 * public names are chosen in src/index.ts.
 */
export { AbstractSnapshotStore, bodyChunks, compareKeys } from './snapshot-store.js'
export type { ByteRange, GetOptions, InternalPutOptions, ListOptions, ObjectInfo, PutOptions, PutResult, SnapshotStore, SnapshotStoreCapabilities } from './snapshot-store.js'
export { checkTransferLimit, DEFAULT_TRANSFER_LIMIT, releaseOnClose, TransferLimiter } from './transfer-limiter.js'
export { snapshotStoreSchemes } from './schemes.js'
export type { S3Credentials, S3StoreSettings } from './schemes.js'
