/**
 * A store's lineage: which rewrite of a partition's history its state
 * descends from. Replaying the same log from the same snapshot gives the same
 * state, so a local store at or after a snapshot's positions can stand in for
 * it, unless an offline transform (src/transform/) rewrote the state at some
 * position: a store of the old state is then no copy of the new one, however
 * far its positions are. The transform writes a new lineage into the store it
 * builds, every snapshot of that store and of its restored copies carries it
 * (SnapshotManifest.lineage), and a restore uses a local store as it is only
 * when its lineage is the snapshot's (docs/state-evolution.md).
 */
import type { ClassicLevel } from 'classic-level'
import { metadataKey } from './keys.js'

/** The store metadata that holds the lineage record. */
export const LINEAGE_METADATA = 'tidemark.lineage'

/** What a transform records (LINEAGE_METADATA); `id` is what manifests carry and restores compare. */
export interface LineageRecord {
  /** Random, 16 hex digits. */
  id: string
  /** ISO 8601: when the transform built the store. */
  createdAt: string
  /** Where the state came from: a snapshot of a job (and the offset it was read at), or records. */
  origin: { job: string; partition: string; snapshot: string | null; offset: string | null } | { records: true }
}

/** Lineage ids as manifests may carry them. */
export const LINEAGE_ID = /^[0-9a-f]{16,64}$/

/**
 * The lineage id of the store, or undefined for a store no transform built
 * (nor restored from one that was). Kept by the store from its open on
 * (PartitionStore.lineage): a checkpoint of an idle-closed store reads it
 * without reopening the store.
 */
export async function readLineage(store: { readonly lineage: string | undefined }): Promise<string | undefined> {
  return store.lineage
}

/** The lineage id a LINEAGE_METADATA document holds, if it is one. */
export function lineageIdOf(record: unknown): string | undefined {
  const id = (record as Partial<LineageRecord> | null | undefined)?.id
  return typeof id === 'string' && LINEAGE_ID.test(id) ? id : undefined
}

/** What a store reads when it opens (store-load): its lineage id. */
export async function loadLineage(db: ClassicLevel<string, string>): Promise<string | undefined> {
  const bytes = await db.get<Buffer, Buffer>(metadataKey(LINEAGE_METADATA), { keyEncoding: 'buffer', valueEncoding: 'buffer' })
  return bytes === undefined ? undefined : lineageIdOf(JSON.parse(bytes.toString('utf8')))
}
