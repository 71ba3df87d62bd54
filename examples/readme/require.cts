// The README's CommonJS example (require() of the ES module, Node.js 20.19+),
// compiled to .cjs (its import becomes a require() call) and run against the packed package by
// test/package/pack.package.ts; the part between the region markers is the
// README's code block (test/package/readme-examples.test.ts).

// #region readme
// In a CommonJS file (.cts, .cjs, or "type": "commonjs") this import compiles to
// require('tidemark'); plain JavaScript writes const { ... } = require('tidemark').
import { PartitionStore, valueState, isTidemarkError } from 'tidemark'

async function main(): Promise<void> {
  const counts = valueState<number>('counts')
  const store = await PartitionStore.open({ path: './state/cjs-0', states: [counts] })
  const tx = store.transaction()
  tx.value(counts).put('visits', ((await tx.value(counts).get('visits')) ?? 0) + 1)
  await tx.commit({ topic: 'visits', partition: 0, offset: (store.position('visits', 0) ?? -1n) + 1n })
  console.log('visits', store.transaction().value(counts).getSync('visits'))
  await store.close()
}

main().catch((error: unknown) => {
  console.error(isTidemarkError(error) ? `${error.code}: ${error.message}` : error)
  process.exitCode = 1
})
// #endregion readme
