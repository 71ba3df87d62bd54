// The golden samples of offline transforms, test/fixtures/formats/transform/:
// a manifest that carries a lineage, and a file of state records (JSON lines,
// as state dump prints them and bootstrapState reads them), with what today's
// code reads from each. scripts/formats/make-transform-golden.ts writes them;
// transform-golden.test.ts reads them again. See docs/formats.md.
import { join } from 'node:path'
import { rawCodec } from '../../src/store/codec.js'
import { mapState, valueState, type StateDefinition } from '../../src/store/state.js'
import type { StateEntry } from '../../src/transform/index.js'
import { VERSIONED_DIR, VERSIONED_JOB } from './versioned-samples.js'

export const TRANSFORM_DIR = join(import.meta.dirname, '..', 'fixtures', 'formats', 'transform')
/** The manifest sample is the first state-versions manifest with a lineage: the same job, epoch and sequence. */
export const LINEAGE_SOURCE = join(VERSIONED_DIR, 'snapshot-store', VERSIONED_JOB, '0', 'manifests', '0000000001-000000000000.json')
export const LINEAGE_MANIFEST = join(TRANSFORM_DIR, 'manifest-lineage.json')
export const LINEAGE = '0123456789abcdef'
export const RECORDS = join(TRANSFORM_DIR, 'records.jsonl')
export const RECORDS_EXPECTED = join(TRANSFORM_DIR, 'records.expected.json')

/** The program the records are of. */
export function recordStates(): StateDefinition[] {
  return [
    valueState<number>('counts'),
    mapState<number>('visits'),
    valueState<Uint8Array, 'bytes'>('blobs', { codec: rawCodec(), keyType: 'bytes' }),
    valueState<{ n: number; note: string }>('scores', { version: 2, upgrade: { 1: (n: number) => ({ n, note: 'from v1' }) } }),
  ] as StateDefinition[]
}

/** Every kind of line a records file has: text and base64 keys, a map record, a codec's bytes, a JSON value of a raw state, values at an old and at the current version. */
export const RECORD_LINES = [
  { state: 'counts', key: 'a', value: 3 },
  { state: 'counts', keyBase64: '//4=', value: 7 },
  { state: 'visits', key: 'u1', subKey: 'x', value: 5 },
  { state: 'visits', key: 'u2', subKeyBase64: 'eQ==', value: 6 },
  { state: 'blobs', keyBase64: 'AP8=', valueBase64: 'AQID' },
  { state: 'blobs', key: 'text', value: 'hi' },
  { state: 'scores', key: 'alice', version: 1, value: 7 },
  { state: 'scores', key: 'bob', version: 2, value: { n: 3, note: 'as is' } },
]

/** An entry as JSON: bytes as { base64 }. */
export function plainEntry(e: StateEntry): unknown {
  const bytes = (v: unknown): unknown => (v instanceof Uint8Array ? { base64: Buffer.from(v).toString('base64') } : v)
  return { state: e.state, key: bytes(e.key), ...(e.subKey === undefined ? {} : { subKey: bytes(e.subKey) }), value: bytes(e.value) }
}
