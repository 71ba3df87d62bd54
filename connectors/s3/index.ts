export { S3SnapshotStore } from './s3-store.js'
export { S3_DEFAULTS } from './options.js'
export type { S3SnapshotStoreOptions, S3Credentials } from './options.js'
