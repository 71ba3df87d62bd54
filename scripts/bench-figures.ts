// The words and numbers of a bench figure file, for the bench table of
// docs/benchmarks.md (scripts/readme-bench.ts): a figure by name, and the
// phrases a row builds from figures, which leave out what a file lacks.

export type Figures = Record<string, unknown>

/**
 * A figure by name: at the top of the saved result, or, when a bench saved
 * several lines (an array such as `lines` or `results`), in the first of them
 * that has it. Only a finite number counts.
 */
export function figure(f: Figures, name: string): number | undefined {
  const found = lookup(f, name)
  return typeof found === 'number' && Number.isFinite(found) ? found : undefined
}

export function lookup(f: Figures, name: string): unknown {
  if (name in f) return f[name]
  for (const v of Object.values(f)) {
    if (!Array.isArray(v)) continue
    for (const item of v) if (item !== null && typeof item === 'object' && name in item) return (item as Figures)[name]
  }
  return undefined
}


export const round = (n: number, digits: number): number => Math.round(n * 10 ** digits) / 10 ** digits
export const int = (n: number): string => Math.round(n).toLocaleString('en-US')
export const mb = (bytes: number): string => (bytes >= 1e6 ? `${round(bytes / 1e6, bytes >= 1e8 ? 0 : 1)} MB` : `${round(bytes / 1e3, 1)} kB`)

/** `name` 0.93 (0.90–0.97, 7 rounds): a ratio with its spread when the bench gives one. */
export function ratio(f: Figures, name: string): string | undefined {
  const r = figure(f, name)
  if (r === undefined) return undefined
  const lo = figure(f, `${name}Min`)
  const hi = figure(f, `${name}Max`)
  const rounds = figure(f, `${name}Rounds`) ?? (name === 'ratio' ? figure(f, 'rounds') : undefined)
  const spread = [lo !== undefined && hi !== undefined ? `${lo}–${hi}` : undefined, rounds === undefined ? undefined : `${rounds} rounds`].filter((x) => x !== undefined)
  return `\`${name}\` ${r}${spread.length > 0 ? ` (${spread.join(', ')})` : ''}`
}

/** A phrase built from figures: undefined (left out) when one of them is missing. */
export function phrase(f: Figures, names: readonly string[], text: (...xs: number[]) => string): string | undefined {
  const xs = names.map((n) => figure(f, n))
  return xs.every((x) => x !== undefined) ? text(...(xs as number[])) : undefined
}

export const clauses = (parts: ReadonlyArray<string | undefined>): string => parts.filter((p) => p !== undefined).join('; ') || 'no known figure in the file'

