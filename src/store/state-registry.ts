/**
 * The store's state registry: one record per state, `0x00 's' name -> JSON`
 * (keys.ts), written when a store first opens with the state. A record holds
 * the state's kind and, once a versioned state's value was written, the
 * highest version written (`{"kind":"value","version":3}`). Opening checks the
 * program's definitions against it, one record per state: never a scan of
 * values (but one seek, for a versioned state of a non-JSON codec that had no
 * version before).
 */
import { TidemarkError } from '../errors.js'
import type { StateDefinition } from './state.js'

export interface StateRecord {
  readonly kind: 'value' | 'map'
  /** Highest version a value of the state was written at; absent: no versioned value was ever written. */
  readonly version?: number
}

/** A state as a store or a snapshot manifest records it. */
export interface RecordedState extends StateRecord {
  readonly name: string
}

export function encodeStateRecord(record: StateRecord): Buffer {
  return Buffer.from(JSON.stringify(record.version === undefined ? { kind: record.kind } : { kind: record.kind, version: record.version }), 'utf8')
}

export function decodeStateRecord(bytes: Buffer): StateRecord {
  const doc = JSON.parse(bytes.toString('utf8')) as { kind: 'value' | 'map'; version?: unknown }
  return typeof doc.version === 'number' ? { kind: doc.kind, version: doc.version } : { kind: doc.kind }
}

/** "version 3", or "no version" for a state declared without one. */
function describeVersion(version: number | undefined): string {
  return version === undefined ? 'no version' : `version ${version}`
}

/**
 * The error of a state held at a higher version than the program declares:
 * its values may not be decoded by this program's code (a rolled-back
 * deployment would misread them, and its writes would mix versions).
 */
export function versionAhead(name: string, stored: number, declared: number | undefined, where: string): TidemarkError {
  return new TidemarkError(
    'TIDEMARK_STATE_VERSION_AHEAD',
    `state ${JSON.stringify(name)} in ${where} holds values at version ${stored}, but this program declares ${describeVersion(declared)}; a newer program wrote them. Deploy a program that declares version ${stored} or later (see docs/state-evolution.md)`,
    { details: { state: name, storedVersion: stored, declaredVersion: declared ?? null } },
  )
}

/** Throws TIDEMARK_STATE_VERSION_AHEAD for the first of `declared` that `recorded` holds at a higher version. */
export function checkVersions(recorded: Iterable<RecordedState>, declared: ReadonlyMap<string, StateDefinition>, where: string): void {
  for (const r of recorded) {
    const def = declared.get(r.name)
    if (def !== undefined && r.version !== undefined && r.version > (def.version ?? 0)) throw versionAhead(r.name, r.version, def.version, where)
  }
}

/**
 * Checks the declared states against the stored records, before anything is
 * written: a kind that changed, a version ahead of the program's, a non-JSON
 * state made versioned over unversioned values. `hasValues` tells whether a
 * state holds a value. Returns the records of the states that are new.
 */
export async function checkDeclaredStates(
  stored: ReadonlyMap<string, StateRecord>,
  declared: ReadonlyMap<string, StateDefinition>,
  path: string,
  hasValues: (def: StateDefinition) => Promise<boolean>,
): Promise<Map<string, StateRecord>> {
  const added = new Map<string, StateRecord>()
  for (const def of declared.values()) {
    const record = stored.get(def.name)
    if (record === undefined) {
      added.set(def.name, { kind: def.kind })
      continue
    }
    if (record.kind !== def.kind) {
      throw new TidemarkError('TIDEMARK_STATE_CONFLICT', `state ${JSON.stringify(def.name)} was created as a ${record.kind} state in ${path}; it cannot be opened as a ${def.kind} state`)
    }
  }
  checkVersions([...stored].map(([name, r]) => ({ name, ...r })), declared, `the store ${path}`)
  for (const def of declared.values()) {
    const record = stored.get(def.name)
    // A JSON value without a header is a version 1 value; another codec's bytes cannot be told from a header.
    if (record === undefined || record.version !== undefined || def.versioning === undefined || def.versioning.json) continue
    if (await hasValues(def)) {
      throw new TidemarkError(
        'TIDEMARK_STATE_CONFLICT',
        `state ${JSON.stringify(def.name)} in ${path} holds values written without a version by its ${def.codec.name} codec, whose bytes cannot be told from versioned ones; give it a version only as a new state (another name), or keep it unversioned (see docs/state-evolution.md)`,
      )
    }
  }
  return added
}

/** Refuses a value that is no state definition, or a state the store was not opened with (or with another kind or version). */
export function checkDeclared(states: ReadonlyMap<string, StateDefinition>, def: StateDefinition): void {
  if (typeof def !== 'object' || def === null || typeof def.name !== 'string') {
    throw new TypeError(`expected a state definition (made by valueState() or mapState()), got ${def === null ? 'null' : Array.isArray(def) ? 'an array' : typeof def}`)
  }
  const known = states.get(def.name)
  if (known === undefined) {
    throw new TidemarkError('TIDEMARK_UNKNOWN_STATE', `state ${JSON.stringify(def?.name)} is not one of this store's states (${[...states.keys()].join(', ') || 'none'}); pass it in options.states`)
  }
  if (known.kind !== def.kind) {
    throw new TidemarkError('TIDEMARK_STATE_CONFLICT', `state ${JSON.stringify(def.name)} is a ${known.kind} state in this store, not a ${def.kind} state`)
  }
  const v = (d: StateDefinition): string => (d.version === undefined ? 'no version' : `version ${d.version}`)
  if (known.version !== def.version) throw new TidemarkError('TIDEMARK_STATE_CONFLICT', `state ${JSON.stringify(def.name)} was opened with ${v(known)}; this definition has ${v(def)}`)
}
