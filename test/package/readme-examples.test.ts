import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'

const root = join(import.meta.dirname, '..', '..')
const dir = join(root, 'examples', 'readme')

const REGION = /\/\/ #region readme\n([\s\S]*?)\/\/ #endregion readme\n/

/** The lines between `// #region readme` and `// #endregion readme`. */
function readmeRegion(source: string, file: string): string {
  const m = REGION.exec(source)
  if (m === null) throw new Error(`${file} has no // #region readme ... // #endregion readme`)
  return m[1]!
}

function codeBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]!)
}

// examples/readme/ holds the README's examples as programs that
// test/package/pack.package.ts (npm run test:package) compiles under strict and
// runs against the packed package; this test keeps the README's blocks equal
// to them, so the README cannot drift from what is compiled, and keeps every
// block a complete program: a file holds nothing but comments outside its
// block, so what compiles and runs is exactly what a reader copies.
describe("the README's examples", () => {
  const files = readdirSync(dir).filter((f) => /\.c?ts$/.test(f)).sort()
  const blocks = codeBlocks(readFileSync(join(root, 'README.md'), 'utf8'))

  it('are all in examples/readme', () => {
    expect(files).toEqual(['consumer.ts', 'first-example.ts', 'processor.ts', 'require.cts'])
  })

  it.each(files)('examples/readme/%s is a code block of README.md, character for character', (file) => {
    const region = readmeRegion(readFileSync(join(dir, file), 'utf8'), file)
    expect(blocks).toContain(region)
  })

  it.each(files)('examples/readme/%s holds nothing but comments outside that block: the block is the whole program', (file) => {
    const outside = readFileSync(join(dir, file), 'utf8').replace(REGION, '')
    expect(outside.split('\n').filter((line) => line.trim() !== '' && !line.trimStart().startsWith('//'))).toEqual([])
  })

  it('every TypeScript block of README.md is one of them', () => {
    const regions = files.map((file) => readmeRegion(readFileSync(join(dir, file), 'utf8'), file))
    expect(blocks.length).toBeGreaterThan(0)
    for (const block of blocks) expect(regions, block.split('\n')[0]).toContain(block)
  })
})
