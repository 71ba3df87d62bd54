/**
 * The user's JavaScript modules that state commands load: a --handler
 * (point-in-time reads) and a --module (transforms, bootstraps). A path that
 * names nothing, or a module without what the command needs, is a mistake in
 * the command line (exit 2).
 */
import { access } from 'node:fs/promises'
import { pathToFileURL } from 'node:url'
import type { EventHandler } from '../runtime/partition-synchronizer.js'
import type { Codec } from '../store/codec.js'
import type { StateDefinition } from '../store/state.js'
import type { KeyTransform, StateTransform } from '../transform/index.js'
import { UsageError } from './context.js'

/** The module's exports, a default export object's merged in; and the default export itself. */
async function importModule(path: string, flag: string): Promise<Record<string, unknown> & { default?: unknown }> {
  try {
    await access(path)
  } catch (err) {
    throw new UsageError(`${flag} ${path}: ${(err as Error).message}`, { cause: err })
  }
  const loaded = (await import(pathToFileURL(path).href)) as Record<string, unknown>
  // A default export object stands for the module's own exports.
  const fallback = loaded.default
  return fallback !== null && typeof fallback === 'object' ? { ...loaded, ...(fallback as Record<string, unknown>) } : loaded
}

/** What a --handler module must export. */
export interface HandlerModule {
  handler: EventHandler<unknown>
  states: readonly StateDefinition[]
  codec?: Codec<unknown>
}

export async function loadHandler(path: string): Promise<HandlerModule> {
  const m = await importModule(path, '--handler')
  if (typeof m.handler !== 'function' || !Array.isArray(m.states)) {
    throw new UsageError(`--handler ${path} must export a function handler and an array states (or a default export with them)`)
  }
  return m as unknown as HandlerModule
}

/** What a --module of `state transform` and `state bootstrap` exports. */
export interface TransformModule {
  /** The target program's state definitions. */
  states: readonly StateDefinition[]
  /** The source's: the source program's (state transform; default: the --handler module's states, else `states`), or the records' (state bootstrap; default `states`). */
  sourceStates?: readonly StateDefinition[]
  transform?: KeyTransform
  perState?: StateTransform
}

/**
 * A --module: `states` (an array), and optionally `sourceStates`, and
 * `transform` (per key; also a default export that is a function) or
 * `perState`; named exports or one default export object with them.
 */
export async function loadTransformModule(path: string, options: { perState: boolean }): Promise<TransformModule> {
  const m = await importModule(path, '--module')
  const transform = m.transform ?? (typeof m.default === 'function' ? m.default : undefined)
  const shape = options.perState ? '{ states, sourceStates?, transform? | perState? }' : '{ states, sourceStates?, transform? }'
  if (!Array.isArray(m.states)) throw new UsageError(`--module ${path} must export an array states, the state definitions of the program that runs on the result (${shape})`)
  if (m.sourceStates !== undefined && !Array.isArray(m.sourceStates)) throw new UsageError(`--module ${path}: sourceStates must be an array of state definitions`)
  if (transform !== undefined && typeof transform !== 'function') throw new UsageError(`--module ${path}: transform must be a function (entry, target) => entries`)
  if (m.perState !== undefined && (!options.perState || typeof m.perState !== 'function')) {
    throw new UsageError(options.perState ? `--module ${path}: perState must be a function (state, target) => void` : `--module ${path}: a bootstrap runs a per-record transform, not perState`)
  }
  if (transform !== undefined && m.perState !== undefined) throw new UsageError(`--module ${path} exports both transform and perState; export one`)
  return {
    states: m.states as readonly StateDefinition[],
    ...(m.sourceStates === undefined ? {} : { sourceStates: m.sourceStates as readonly StateDefinition[] }),
    ...(transform === undefined ? {} : { transform: transform as KeyTransform }),
    ...(m.perState === undefined ? {} : { perState: m.perState as StateTransform }),
  }
}
