// The declarations use Node's types (Buffer, node:stream, ...): this pulls
// @types/node into an app's program even when its tsconfig lists no "types"
// (TypeScript 7's default).
/// <reference types="node" preserve="true" />
export { S3SnapshotStore } from './s3-store.js'
export { S3_DEFAULTS } from './options.js'
export type { S3SnapshotStoreOptions, S3Credentials } from './options.js'
