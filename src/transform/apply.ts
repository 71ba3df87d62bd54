/**
 * The user's function over the source: per key (each entry in, the entries
 * it returns out), per state (a state's entries in, what it puts out), or a
 * copy. A throw of the function is TIDEMARK_TRANSFORM_FAILED, naming where.
 */
import { isTidemarkError, TidemarkError } from '../errors.js'
import { scanState, type StateDefinition } from '../store/index.js'
import { describeValue } from '../util/index.js'
import type { ResolvedTransform } from './options.js'
import type { SourceStore } from './source-store.js'
import type { TargetStore } from './target-store.js'
import type { KeyTransform, StateEntry, TransformOutput } from './types.js'

/** Source entries read so far: the progress reports it. */
export interface ReadCount { read: number }

/** Runs the transform over every declared state of the source, then copies Tidemark's own states that `internal` keeps. */
export async function applyTransform(r: ResolvedTransform, source: SourceStore, target: TargetStore, internal: readonly StateDefinition[], count: ReadCount): Promise<void> {
  const t = r.transform
  for (const def of source.states) {
    if (t.kind === 'state') {
      const counted = async function* (): AsyncGenerator<StateEntry> {
        for await (const entry of source.entries(def)) {
          count.read++
          yield entry
        }
      }
      try {
        await t.fn({ name: def.name, kind: def.kind, entries: counted }, target)
      } catch (err) {
        throw transformFailed(err, `on state ${JSON.stringify(def.name)}`, { state: def.name })
      }
      continue
    }
    for await (const entry of source.entries(def)) {
      count.read++
      if (t.kind === 'copy') await target.write(entry, entry)
      else await applyToEntry(t.fn, entry, target)
    }
  }
  for (const def of internal) {
    for await (const e of scanState(source.store, def)) await target.writeInternal(def, e.key, e.value)
  }
}

/** One entry through a per-key transform, and what it returned into the target. */
export async function applyToEntry(fn: KeyTransform, entry: StateEntry, target: TargetStore): Promise<void> {
  let out: TransformOutput
  try {
    out = await fn(entry, target)
  } catch (err) {
    throw transformFailed(err, `on state ${JSON.stringify(entry.state)} key ${describeValue(entry.key)}`, { state: entry.state, key: entry.key })
  }
  if (out === null || out === undefined) return
  if (Array.isArray(out)) {
    for (const e of out as readonly StateEntry[]) await target.write(e, entry)
  } else {
    await target.write(out as StateEntry, entry)
  }
}

/** The function's own error, named; Tidemark's errors from inside it (a bad entry it put, a failed read) pass as they are. */
function transformFailed(err: unknown, where: string, details: Record<string, unknown>): unknown {
  if (isTidemarkError(err)) return err
  return new TidemarkError('TIDEMARK_TRANSFORM_FAILED', `the transform threw ${where}: ${(err as Error)?.message ?? String(err)}; no snapshot was written`, { cause: err, details })
}
