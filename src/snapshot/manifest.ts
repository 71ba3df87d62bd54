import { validatePosition, type Position } from '../store/position.js'
import { LINEAGE_ID } from '../store/lineage.js'
import type { RecordedState } from '../store/state-registry.js'
import { MAX_STATE_VERSION } from '../store/versioning.js'
import { MAX_EPOCH, MAX_SEQUENCE, snapshotId } from './layout.js'
import { SNAPSHOT_FILE_NAME } from './leveldb-files.js'

export const MANIFEST_FORMAT = 'tidemark-snapshot'
export const MANIFEST_VERSION = 1

/**
 * Bounds on what a manifest may hold, so that a junk or hostile object is
 * refused before it costs memory (a 55 MB manifest once took 452 MB of RSS
 * to parse). A file entry takes about 200 bytes, so 16 MiB holds some 80,000
 * files: 160 GB of state in LevelDB's default 2 MB tables.
 */
export const MAX_MANIFEST_BYTES = 16 * 1024 * 1024
export const MAX_MANIFEST_FILES = 100_000
export const MAX_MANIFEST_OBJECTS = 100_000
export const MAX_MANIFEST_POSITIONS = 10_000
export const MAX_MANIFEST_STATES = 10_000

/** One LevelDB file of a snapshot and where its bytes are. */
export interface SnapshotFile {
  /** File name inside the store directory (flat, e.g. `000123.ldb`, `CURRENT`). */
  readonly name: string
  readonly size: number
  /** Hex SHA-256 of the file's bytes. */
  readonly sha256: string
  /** Data object key, relative to the partition's prefix (`data/….tar`). */
  readonly object: string
  /** Byte offset of the file's data inside the object (its tar header is the 512 bytes before). */
  readonly offset: number
}

export interface SnapshotObject {
  /** Relative to the partition's prefix. */
  readonly key: string
  readonly size: number
}

/** The document that makes a snapshot exist. Never overwritten; written after every object it names. */
export interface SnapshotManifest {
  readonly format: typeof MANIFEST_FORMAT
  readonly version: typeof MANIFEST_VERSION
  readonly id: string
  readonly job: string
  readonly partition: string
  readonly epoch: number
  readonly sequence: number
  /** ISO 8601. */
  readonly createdAt: string
  /** Id of the newest snapshot this one was planned against (it may reference its files), or null. */
  readonly parent: string | null
  /** Id of the newest full snapshot at or before this one. */
  readonly base: string
  /** Every file was uploaded with this snapshot (a compact point of the snapshot chain). */
  readonly full: boolean
  /** Source positions of the checkpoint: the events up to them are in the state. */
  readonly positions: readonly Position[]
  /**
   * Every state of the store at the checkpoint, in name order: its kind and,
   * for a versioned state, the highest version a value was written at.
   * Absent in manifests written before states had versions; a reader that
   * does not know the field ignores it.
   */
  readonly states?: readonly RecordedState[]
  /**
   * The store's lineage (src/store/lineage.ts): set when an offline
   * transform built the state this snapshot descends from. A restore uses a
   * local store as it is only when its lineage is this one. Absent for a
   * state no transform rewrote.
   */
  readonly lineage?: string
  /** Sum of the files' sizes: the live state. */
  readonly stateBytes: number
  /** Every object that `files` references, with its size. */
  readonly objects: readonly SnapshotObject[]
  readonly files: readonly SnapshotFile[]
}

/** A manifest of a newer format version: written by a newer Tidemark, so its content (and what it references) is unknown here. */
export class NewerManifestVersionError extends Error {
  readonly version: number
  constructor(version: number) {
    super(`version ${version} is newer than this Tidemark reads (${MANIFEST_VERSION})`)
    this.name = 'NewerManifestVersionError'
    this.version = version
  }
}

export function encodeManifest(manifest: SnapshotManifest): Buffer {
  const json = JSON.stringify(manifest, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value))
  return Buffer.from(`${json}\n`, 'utf8')
}

/**
 * Parses and validates a manifest read from the snapshot store. A manifest
 * is input from outside (another process wrote it, bits rot), so every field
 * is checked: names must be plain LevelDB file names, objects must lie in the
 * partition's data folder, offsets must fall on tar blocks, and no list may
 * be longer than its bound. Throws an Error whose message says what is wrong.
 */
export function parseManifest(bytes: Uint8Array, expect: { job: string; partition: string; epoch: number; sequence: number }): SnapshotManifest {
  if (bytes.byteLength > MAX_MANIFEST_BYTES) throw new Error(`it has ${bytes.byteLength} bytes, more than a manifest may have (${MAX_MANIFEST_BYTES})`)
  let doc: unknown
  try {
    doc = JSON.parse(Buffer.from(bytes).toString('utf8'))
  } catch (err) {
    throw new Error(`not JSON: ${(err as Error).message}`)
  }
  const m = object(doc, 'manifest')
  if (m.format !== MANIFEST_FORMAT) throw new Error(`format is ${JSON.stringify(m.format)}, not '${MANIFEST_FORMAT}'`)
  if (m.version !== MANIFEST_VERSION) {
    if (typeof m.version === 'number' && m.version > MANIFEST_VERSION) throw new NewerManifestVersionError(m.version)
    throw new Error(`version is ${JSON.stringify(m.version)}, not ${MANIFEST_VERSION}`)
  }
  // Every version 1 manifest ends with it: without it, the object was cut
  // short, even where what is left still parses (cut by exactly that byte).
  if (bytes[bytes.byteLength - 1] !== 0x0a) throw new Error(`it does not end with the newline every manifest ends with (${bytes.byteLength} bytes): cut short`)
  const epoch = int(m.epoch, 'epoch', MAX_EPOCH)
  const sequence = int(m.sequence, 'sequence', MAX_SEQUENCE)
  if (epoch !== expect.epoch || sequence !== expect.sequence) {
    throw new Error(`epoch/sequence ${epoch}/${sequence} differ from the manifest's key (${expect.epoch}/${expect.sequence})`)
  }
  const id = str(m.id, 'id')
  if (id !== snapshotId(epoch, sequence)) throw new Error(`id '${id}' does not match epoch ${epoch} and sequence ${sequence}`)
  if (m.job !== expect.job || m.partition !== expect.partition) {
    throw new Error(`belongs to ${JSON.stringify(m.job)}/${JSON.stringify(m.partition)}, not ${expect.job}/${expect.partition}`)
  }
  const createdAt = str(m.createdAt, 'createdAt')
  if (Number.isNaN(Date.parse(createdAt))) throw new Error(`createdAt '${createdAt}' is not a date`)
  const parent = m.parent === null ? null : str(m.parent, 'parent')
  const base = str(m.base, 'base')
  if (typeof m.full !== 'boolean') throw new Error('full must be a boolean')
  const positions = array(m.positions, 'positions', MAX_MANIFEST_POSITIONS).map((p, i) => {
    const o = object(p, `positions[${i}]`)
    if (typeof o.offset !== 'string' || !/^\d{1,19}$/.test(o.offset)) throw new Error(`positions[${i}].offset must be a decimal string`)
    try {
      return validatePosition({ topic: o.topic, partition: o.partition, offset: BigInt(o.offset) }, `positions[${i}]`)
    } catch (err) {
      throw new Error((err as Error).message)
    }
  })
  const states = m.states === undefined ? undefined : parseStates(m.states)
  if (m.lineage !== undefined && (typeof m.lineage !== 'string' || !LINEAGE_ID.test(m.lineage))) throw new Error('lineage must be a string of 16 to 64 lowercase hex digits')
  const lineage = m.lineage as string | undefined

  const objects = array(m.objects, 'objects', MAX_MANIFEST_OBJECTS).map((o, i) => {
    const obj = object(o, `objects[${i}]`)
    return { key: objectKey(obj.key, `objects[${i}].key`), size: int(obj.size, `objects[${i}].size`) }
  })
  const objectSizes = new Map<string, number>()
  for (const o of objects) {
    if (objectSizes.has(o.key)) throw new Error(`object '${o.key}' is listed twice`)
    objectSizes.set(o.key, o.size)
  }

  const names = new Set<string>()
  let stateBytes = 0
  const files = array(m.files, 'files', MAX_MANIFEST_FILES).map((f, i) => {
    const o = object(f, `files[${i}]`)
    const name = str(o.name, `files[${i}].name`)
    if (!SNAPSHOT_FILE_NAME.test(name)) throw new Error(`files[${i}].name ${JSON.stringify(name)} is not a LevelDB file name`)
    if (names.has(name)) throw new Error(`file '${name}' is listed twice`)
    names.add(name)
    const size = int(o.size, `files[${i}].size`)
    const sha256 = str(o.sha256, `files[${i}].sha256`)
    if (!/^[0-9a-f]{64}$/.test(sha256)) throw new Error(`files[${i}].sha256 is not a hex SHA-256`)
    const objectName = objectKey(o.object, `files[${i}].object`)
    const offset = int(o.offset, `files[${i}].offset`)
    if (offset < 512 || offset % 512 !== 0) throw new Error(`files[${i}].offset ${offset} is not on a tar block after a header`)
    const objectSize = objectSizes.get(objectName)
    if (objectSize === undefined) throw new Error(`files[${i}].object '${objectName}' is not in objects`)
    if (offset + size > objectSize) throw new Error(`file '${name}' ends at byte ${offset + size}, past the end of its object (${objectSize} bytes)`)
    stateBytes += size
    return { name, size, sha256, object: objectName, offset }
  })
  if (!names.has('CURRENT')) throw new Error('files has no CURRENT')
  if (![...names].some((n) => n.startsWith('MANIFEST-'))) throw new Error('files has no MANIFEST')
  if (int(m.stateBytes, 'stateBytes') !== stateBytes) throw new Error(`stateBytes ${String(m.stateBytes)} differs from the sum of the file sizes (${stateBytes})`)

  return { format: MANIFEST_FORMAT, version: MANIFEST_VERSION, id, job: expect.job, partition: expect.partition, epoch, sequence, createdAt, parent, base, full: m.full, positions, ...(states === undefined ? {} : { states }), ...(lineage === undefined ? {} : { lineage }), stateBytes, objects, files }
}

function parseStates(value: unknown): RecordedState[] {
  const names = new Set<string>()
  return array(value, 'states', MAX_MANIFEST_STATES).map((s, i) => {
    const o = object(s, `states[${i}]`)
    const name = str(o.name, `states[${i}].name`)
    if (names.has(name)) throw new Error(`state ${JSON.stringify(name)} is listed twice`)
    names.add(name)
    if (o.kind !== 'value' && o.kind !== 'map') throw new Error(`states[${i}].kind must be 'value' or 'map'`)
    if (o.version === undefined) return { name, kind: o.kind }
    const version = int(o.version, `states[${i}].version`, MAX_STATE_VERSION)
    if (version < 1) throw new Error(`states[${i}].version must be an integer from 1 to ${MAX_STATE_VERSION}`)
    return { name, kind: o.kind, version }
  })
}

function objectKey(value: unknown, name: string): string {
  const key = str(value, name)
  if (!/^data\/[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.tar$/.test(key)) throw new Error(`${name} ${JSON.stringify(key)} is not a data object of this partition`)
  return key
}

function object(value: unknown, name: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error(`${name} must be an object`)
  return value as Record<string, unknown>
}

function array(value: unknown, name: string, max: number): unknown[] {
  if (!Array.isArray(value)) throw new Error(`${name} must be an array`)
  if (value.length > max) throw new Error(`${name} has ${value.length} entries, more than a manifest may have (${max})`)
  return value
}

function str(value: unknown, name: string): string {
  if (typeof value !== 'string' || value.length === 0) throw new Error(`${name} must be a non-empty string`)
  return value
}

function int(value: unknown, name: string, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0 || value > max) throw new Error(`${name} must be an integer from 0 to ${max}`)
  return value
}

/** True when every position of `snapshot` is at or before the matching position of `local`. */
export function positionsAtOrAfter(local: readonly Position[], snapshot: readonly Position[]): boolean {
  return snapshot.every((p) => {
    const mine = local.find((l) => l.topic === p.topic && l.partition === p.partition)
    return mine !== undefined && mine.offset >= p.offset
  })
}
