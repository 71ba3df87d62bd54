/**
 * The command a mistyped one most likely meant (`tidemark snapshot list`:
 * `snapshots`), for the usage error that refuses it.
 */

/** Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`: optimal string alignment distance. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)])
  for (let j = 1; j <= b.length; j++) d[0]![j] = j
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let best = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, d[i - 2]![j - 2]! + 1)
      d[i]![j] = best
    }
  }
  return d[a.length]![b.length]!
}

/**
 * The name nearest to `word`, or undefined when none is near: at most one
 * edit per three letters of the name (at least one), ignoring case, or a
 * word of three letters or more that starts the name (`snap`, `snapshot`).
 * Of equally near names, the first listed.
 */
export function nearest(word: string, names: readonly string[]): string | undefined {
  const typed = word.toLowerCase()
  let best: { name: string; distance: number } | undefined
  for (const name of names) {
    const distance = typed.length >= 3 && name.startsWith(typed) ? 0 : editDistance(typed, name)
    if (distance > Math.max(1, Math.floor(name.length / 3))) continue
    if (best === undefined || distance < best.distance) best = { name, distance }
  }
  return best?.name
}

/** `; did you mean "snapshots"?`, or nothing when no name is near. */
export function didYouMean(word: string, names: readonly string[]): string {
  const name = nearest(word, names)
  return name === undefined ? '' : `; did you mean ${JSON.stringify(name)}?`
}
