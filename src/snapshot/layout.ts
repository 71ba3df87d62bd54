import { assertKey } from '../snapshot-store/snapshot-store.js'
import { describeValue } from '../util/describe-value.js'

/**
 * Where one partition's snapshots live in a snapshot store:
 *
 *   <job>/<partition>/manifests/<epoch:10>-<sequence:12>.json   the commit points
 *   <job>/<partition>/data/<epoch:10>-<sequence:12>-<random>-<n>.tar   tar archives of table files
 *   <job>/<partition>/owner.json   the partition's claim (src/ownership/), which
 *                                  garbage collection never lists: it reads only manifests/ and data/
 *
 * Zero-padded numbers make the store's byte-order listing the (epoch,
 * sequence) order. Data keys carry a random part so that two writers that
 * pick the same sequence never write the same object; manifests of one
 * (epoch, sequence) collide on purpose, so a create-only put can fence them.
 */
export class SnapshotLayout {
  readonly job: string
  readonly partition: string
  /** `<job>/<partition>/` */
  readonly prefix: string
  readonly manifestPrefix: string
  readonly dataPrefix: string
  /** The partition's ownership claim (docs/ownership.md). */
  readonly claimKey: string

  constructor(job: unknown, partition: unknown) {
    this.job = checkSegment(job, 'job')
    this.partition = checkSegment(typeof partition === 'number' ? partitionNumber(partition) : partition, 'partition')
    this.prefix = `${this.job}/${this.partition}/`
    this.manifestPrefix = `${this.prefix}manifests/`
    this.dataPrefix = `${this.prefix}data/`
    this.claimKey = `${this.prefix}owner.json`
  }

  manifestKey(epoch: number, sequence: number): string {
    return `${this.manifestPrefix}${snapshotId(epoch, sequence)}.json`
  }

  /** The (epoch, sequence) of a manifest key, or undefined for a key that is not one. */
  parseManifestKey(key: string): { epoch: number; sequence: number; id: string } | undefined {
    if (!key.startsWith(this.manifestPrefix)) return undefined
    const m = MANIFEST_NAME.exec(key.slice(this.manifestPrefix.length))
    if (m === null) return undefined
    return { epoch: Number(m[1]), sequence: Number(m[2]), id: `${m[1]}-${m[2]}` }
  }

  /** Object keys are stored relative to the partition's prefix, so that a partition's snapshots can be moved as a whole. */
  dataKey(relative: string): string {
    return `${this.prefix}${relative}`
  }

  relativeDataKey(id: string, token: string, n: number): string {
    return `data/${id}-${token}-${n}.tar`
  }

  /** The (epoch, sequence) of the snapshot that wrote a data object (a full key), or undefined for a key of another shape. */
  parseDataKey(key: string): { epoch: number; sequence: number; id: string } | undefined {
    if (!key.startsWith(this.dataPrefix)) return undefined
    const m = DATA_NAME.exec(key.slice(this.dataPrefix.length))
    if (m === null) return undefined
    return { epoch: Number(m[1]), sequence: Number(m[2]), id: `${m[1]}-${m[2]}` }
  }
}

const MANIFEST_NAME = /^(\d{10})-(\d{12})\.json$/
/** A snapshot's id as snapshotId() writes it: `<epoch:10>-<sequence:12>`. */
export const SNAPSHOT_ID = /^\d{10}-\d{12}$/
const DATA_NAME = /^(\d{10})-(\d{12})-[^/]+\.tar$/
export const MAX_EPOCH = 9_999_999_999
export const MAX_SEQUENCE = 999_999_999_999

export function snapshotId(epoch: number, sequence: number): string {
  return `${String(epoch).padStart(10, '0')}-${String(sequence).padStart(12, '0')}`
}

function partitionNumber(n: number): string {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`partition must be a non-negative integer or a string, got ${n}`)
  return String(n)
}

function checkSegment(value: unknown, name: string): string {
  if (typeof value !== 'string') throw new TypeError(`${name} must be a string, got ${describeValue(value)}`)
  if (value.includes('/')) throw new RangeError(`${name} ('${value}') must not contain '/'`)
  assertKey(value, name)
  return value
}

/**
 * A layout for options that name the job and partition under `name`
 * (`options.job`, `from`): the layout's own TypeError or RangeError, which
 * names 'job', comes back prefixed with it.
 */
export function layoutOfOption(job: string, partition: string | number, name: string): SnapshotLayout {
  try {
    return new SnapshotLayout(job, partition)
  } catch (err) {
    if (err instanceof TypeError) throw new TypeError(`${name}: ${err.message}`, { cause: err })
    if (err instanceof RangeError) throw new RangeError(`${name}: ${err.message}`, { cause: err })
    throw err
  }
}
