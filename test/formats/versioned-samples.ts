// The golden samples of versioned states, test/fixtures/formats/state-versions/:
// a partition store and a snapshot store whose states were written by three
// programs in turn (unversioned or version 1, then 2, then 3), and how today's
// code at version 3 reads them. scripts/formats/make-versioned-golden.ts writes
// them and records the readings; versioned-golden.test.ts reads them again.
// See docs/formats.md and docs/state-evolution.md.
import { cp } from 'node:fs/promises'
import { join } from 'node:path'
import { FsSnapshotStore } from '../../src/snapshot-store/fs-store.js'
import { listManifests, readManifest } from '../../src/snapshot/catalog.js'
import { SnapshotLayout } from '../../src/snapshot/layout.js'
import { restoreSnapshot } from '../../src/snapshot/restore/index.js'
import { PartitionStore } from '../../src/store/partition-store.js'
import { customCodec } from '../../src/store/codec.js'
import { mapState, valueState, type StateDefinition, type StateUpgrades } from '../../src/store/state.js'
import { expectedPath, plain, rawEntries } from './samples.js'

type Plain = ReturnType<typeof plain>

export const VERSIONED_DIR = join(import.meta.dirname, '..', 'fixtures', 'formats', 'state-versions')
export const VERSIONED_JOB = 'versioned'
export const VERSIONED_TOPIC = 'orders'

// Version 1: { n }. Version 2: { count }. Version 3: { count, tags }.
type Total = { n?: number; count?: number; tags?: string[] }
const UPGRADES = {
  1: (v: Total): Total => ({ count: v.n! }),
  2: (v: Total): Total => ({ count: v.count!, tags: [] }),
}

/** A codec that is not JSON (so its values always carry a header): JSON text behind a 'P' byte. */
export const PACKED = customCodec<Total>({
  name: 'packed',
  encode: (v) => Buffer.concat([Buffer.from('P'), Buffer.from(JSON.stringify(v))]),
  decode: (b) => JSON.parse(Buffer.from(b).subarray(1).toString('utf8')) as Total,
})

/**
 * The states as the program at `version` declares them; version 1 leaves the
 * JSON states unversioned (as before states had versions) and gives the
 * non-JSON one version 1.
 */
export function versionedStates(version: 1 | 2 | 3): StateDefinition[] {
  const upgrade: StateUpgrades = version === 3 ? UPGRADES : version === 2 ? { 1: UPGRADES[1] } : {}
  const json = version === 1 ? {} : { version, upgrade }
  return [
    valueState<Total>('totals', json),
    mapState<Total, 'string', 'bytes'>('carts', { ...json, subKeyType: 'bytes' }),
    valueState<Total, 'bytes'>('packed', { version, upgrade, codec: PACKED, keyType: 'bytes' }),
  ] as StateDefinition[]
}

export const SAMPLE_KEYS = ['apple', 'fig', 'kiwi', 'pear', 'plum']
export const CART_KEYS = ['alice', 'bob']

/** The value the program at `version` writes for sample number i. */
export function sampleValue(version: 1 | 2 | 3, i: number): Total {
  return version === 1 ? { n: i } : version === 2 ? { count: i } : { count: i, tags: [`t${i}`] }
}

/**
 * What the program at `version` writes: each later program rewrites fewer
 * keys, so the store holds values of every version. Offsets go on from `from`.
 */
export async function writeVersion(store: PartitionStore, version: 1 | 2 | 3, from: bigint): Promise<bigint> {
  const [totals, carts, packed] = versionedStates(version) as [StateDefinition & { kind: 'value' }, StateDefinition & { kind: 'map' }, StateDefinition & { kind: 'value' }]
  const keys = SAMPLE_KEYS.slice(0, SAMPLE_KEYS.length - 2 * (version - 1))
  let offset = from
  for (const [i, key] of keys.entries()) {
    const tx = store.transaction()
    const n = version * 100 + i
    tx.value(totals).put(key, sampleValue(version, n))
    tx.map(carts).put(CART_KEYS[i % 2]!, Buffer.from(key), sampleValue(version, n + 10))
    tx.value(packed).put(Buffer.from([i, 0xff]), sampleValue(version, n + 20))
    await tx.commit({ topic: VERSIONED_TOPIC, partition: 0, offset: offset++ })
  }
  return offset
}

export const VERSIONED_SAMPLES = {
  'partition-store': readVersionedStore,
  'snapshot-store': readVersionedSnapshots,
} as const satisfies Record<string, (golden: string, work: string) => Promise<Plain>>

export type VersionedSampleName = keyof typeof VERSIONED_SAMPLES

export function versionedExpectedPath(name: string, dir = VERSIONED_DIR): string {
  return expectedPath(name, dir)
}

/** Every state's entries read at version 3, the registry's records, the positions. */
async function contents(store: PartitionStore): Promise<Record<string, Plain>> {
  const [totals, carts, packed] = versionedStates(3) as [StateDefinition & { kind: 'value' }, StateDefinition & { kind: 'map' }, StateDefinition & { kind: 'value' }]
  const tx = store.transaction()
  const entries = async <X>(it: AsyncIterable<X>): Promise<Plain> => {
    const out: X[] = []
    for await (const x of it) out.push(x)
    return plain(out)
  }
  const cartEntries: Record<string, Plain> = {}
  for (const key of CART_KEYS) cartEntries[key] = await entries(tx.map(carts).entries(key))
  return {
    positions: plain(store.positions()),
    recorded: plain(store.recordedStates()),
    totals: await entries(tx.value(totals).entries()),
    carts: cartEntries,
    packed: await entries(tx.value(packed).entries()),
  }
}

async function readVersionedStore(golden: string, work: string): Promise<Plain> {
  const path = join(work, 'partition-store')
  await cp(join(golden, 'partition-store'), path, { recursive: true })
  const store = await PartitionStore.open({ path, states: versionedStates(3), create: false })
  let read: Record<string, Plain>
  try {
    read = await contents(store)
  } finally {
    await store.close()
  }
  // State entries and registry records; values as text, so that a header reads as one.
  const raw = await rawEntries(path, (key) => key[0] === 0x01 || (key[0] === 0x00 && key[1] === 0x73), (v) => v.toString('latin1'))
  return { ...read, raw }
}

async function readVersionedSnapshots(golden: string, work: string): Promise<Plain> {
  const root = join(work, 'snapshot-store')
  await cp(join(golden, 'snapshot-store'), root, { recursive: true })
  const store = new FsSnapshotStore({ root })
  const layout = new SnapshotLayout(VERSIONED_JOB, 0)
  const out: Plain[] = []
  for (const ref of await listManifests(store, layout)) {
    const manifest = await readManifest(store, layout, ref)
    const target = join(work, `restored-${manifest.id}`)
    await restoreSnapshot({ snapshotStore: store, job: VERSIONED_JOB, partition: 0, target, snapshot: manifest.id, fsync: false, states: versionedStates(3) })
    const opened = await PartitionStore.open({ path: target, states: versionedStates(3), create: false })
    try {
      out.push({ key: ref.key, states: plain(manifest.states), store: await contents(opened) })
    } finally {
      await opened.close()
    }
  }
  return { snapshots: out }
}
