import { access } from 'node:fs/promises'
import { pathToFileURL } from 'node:url'
import { prefixEnd } from '../../store/keys.js'
import { migrateState } from '../../store/migrate.js'
import type { StateDefinition } from '../../store/state.js'
import { EXIT, help, int, json, noMore, parse, pathArg, UsageError, writeLine, type CliIO } from '../context.js'
import { progressReporter } from '../progress.js'
import { withOpenStore } from '../read-only-store.js'

export const MIGRATE_USAGE = `usage:
  tidemark state migrate <store-dir> --states MODULE [--state NAME] [--batch-size N]
      rewrites every value of the versioned states (or of NAME) at their
      current version, in batches of N (default 1000) each committed with
      the migration's progress: a run that was stopped resumes. MODULE is a
      JavaScript module that exports { states }, the program's state
      definitions. The store is opened in place: the job must not be
      running on it (TIDEMARK_STORE_LOCKED). One JSON line per state:
      {"state","version","scanned","rewritten","resumed"}`

async function loadStates(path: string): Promise<readonly StateDefinition[]> {
  try {
    await access(path)
  } catch (err) {
    throw new UsageError(`--states ${path}: ${(err as Error).message}`, { cause: err })
  }
  const loaded = (await import(pathToFileURL(path).href)) as { states?: unknown; default?: { states?: unknown } }
  const states = Array.isArray(loaded.states) ? loaded.states : loaded.default?.states
  if (!Array.isArray(states)) throw new UsageError(`--states ${path} must export an array states (or a default export with it)`)
  return states as StateDefinition[]
}

/** `tidemark state migrate`: migrateState (src/store/migrate.ts) on a stopped job's store. */
export async function migrate(argv: string[], io: CliIO): Promise<number> {
  const parsed = parse(argv, { states: { type: 'string' }, state: { type: 'string' }, 'batch-size': { type: 'string' }, json: { type: 'boolean' } })
  if (parsed === undefined) return help(io, MIGRATE_USAGE)
  const { positionals: [dirArg, ...extra], values } = parsed
  const path = pathArg(dirArg, '<store-dir>')
  noMore(extra)
  const batchSize = int(values['batch-size'], '--batch-size', 1000, 1)
  const states = await loadStates(pathArg(values.states, '--states'))
  const chosen = states.filter((s) => s.version !== undefined && (values.state === undefined || s.name === values.state))
  if (values.state !== undefined && chosen.length === 0) {
    throw new UsageError(`--state ${values.state} is not a versioned state of --states (${states.filter((s) => s.version !== undefined).map((s) => s.name).join(', ') || 'none'})`)
  }
  await withOpenStore(path, states, async (store) => {
    for (const def of chosen) {
      // A first pass counts the values, so that the progress has a total.
      let total = 0
      for await (const _ of store.scan({ gte: def.prefix, lt: prefixEnd(def.prefix), reverse: false })) total++
      const progress = await progressReporter(io, `migrate ${def.name}`, 'values')
      try {
        const result = await migrateState(store, def as Parameters<typeof migrateState>[1], { batchSize, onProgress: (p) => progress.update(p.scanned, Math.max(total, p.scanned)) })
        await writeLine(io, json({ state: result.state, version: result.version, scanned: result.scanned, rewritten: result.rewritten, resumed: result.resumed }, 'line'))
      } finally {
        progress.stop()
      }
    }
  })
  return EXIT.ok
}
