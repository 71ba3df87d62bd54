/**
 * Checks the layering rules of docs/architecture (CONTRIBUTING.md):
 * - a connector imports src/ only through a layer's door: src/<layer>/index.ts
 *   (or src/errors.ts, the error list every layer shares);
 * - nothing in src/ imports connectors/ (connectors register what they provide);
 * - no file in src/ or connectors/ is above 600 lines, or above 500 without a
 *   comment starting `Long file:` in its first 15 lines.
 * Prints each violation and exits 1 if there is one. Usage: npx tsx scripts/ci/layers.ts
 */
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'

export function checkLayers(root: string): string[] {
  const problems: string[] = []
  const files = (dir: string): string[] =>
    readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
    )
  const specifier = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)'([^']+)'/gm
  for (const file of [...files('src'), ...files('connectors')]) {
    const text = readFileSync(join(root, file), 'utf8')
    const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0)
    const long = text.split('\n').slice(0, 15).some((line) => /^\s*(\/\/|\*|\/\*)\s*Long file:/.test(line))
    if (lines > 600) problems.push(`${file}: ${lines} lines (at most 600)`)
    else if (lines > 500 && !long) problems.push(`${file}: ${lines} lines, above 500 without a 'Long file:' comment in its first 15 lines`)
    for (const match of text.matchAll(specifier)) {
      const spec = match[1]!
      if (!spec.startsWith('.')) continue
      const target = relative(root, resolve(root, dirname(file), spec)).split(sep).join('/').replace(/\.js$/, '.ts')
      if (file.startsWith('src') && target.startsWith('connectors/')) problems.push(`${file}: imports ${spec} (src/ never imports connectors/)`)
      if (file.startsWith('connectors') && target.startsWith('src/')) {
        const door = /^src\/[\w-]+\/index\.ts$/.test(target) || target === 'src/errors.ts'
        if (!door) problems.push(`${file}: imports ${spec}, not a layer's index (src/<layer>/index.ts)`)
      }
    }
  }
  return problems
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const problems = checkLayers(resolve(dirname(fileURLToPath(import.meta.url)), '..', '..'))
  for (const p of problems) console.log(p)
  process.exit(problems.length === 0 ? 0 : 1)
}
