// The declarations use Node's types (Buffer, node:stream, ...): this pulls
// @types/node into an app's program even when its tsconfig lists no "types"
// (TypeScript 7's default).
/// <reference types="node" preserve="true" />
export { TidemarkError, ERROR_CODES, isTidemarkError } from './errors.js'
export type { ErrorCode, TidemarkErrorOptions } from './errors.js'
export * from './store/public.js'
export { AbstractSnapshotStore } from './snapshot-store/snapshot-store.js'
export type { SnapshotStore, SnapshotStoreCapabilities, PutOptions, PutResult, GetOptions, ByteRange, ListOptions, ObjectInfo, InternalPutOptions } from './snapshot-store/snapshot-store.js'
export { FsSnapshotStore } from './snapshot-store/fs-store.js'
export type { FsSnapshotStoreOptions } from './snapshot-store/fs-store-options.js'
export { openSnapshotStore } from './snapshot-store/open.js'
export type { OpenSnapshotStoreOptions } from './snapshot-store/open.js'
export * from './snapshot/public.js'
export * from './ownership/index.js'

export * from './log/public.js'
export * from './runtime/public.js'
export * from './synchronizer/index.js'
export * from './logging/public.js'
export * from './metrics/index.js'
export * from './outputs/public.js'
export * from './replay/index.js'
export * from './transform/index.js'
