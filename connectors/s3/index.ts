// The declarations use Node's types (Buffer, node:stream, ...): this pulls
// @types/node into an app's program even when its tsconfig lists no "types"
// (TypeScript 7's default).
/// <reference types="node" preserve="true" />
import { snapshotStoreSchemes } from '../../src/snapshot-store/index.js'
import { S3SnapshotStore } from './s3-store.js'

export { S3SnapshotStore }
export { S3_DEFAULTS } from './options.js'
export type { S3SnapshotStoreOptions, S3Credentials } from './options.js'

// openSnapshotStore('s3://...') opens its stores through this registration
// (src/snapshot-store/schemes.ts), made when this entry point is first imported.
snapshotStoreSchemes.register('s3:', (options) => new S3SnapshotStore(options))
