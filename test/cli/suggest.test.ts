// The nearest command to a mistyped one (src/cli/suggest.ts).
import { expect, it } from 'vitest'
import { editDistance, nearest } from '../../src/cli/suggest.js'
import { COMMANDS } from '../../src/cli/registry.js'

const names = COMMANDS.map((c) => c.name)

it('counts inserts, deletes, substitutions and swapped neighbours as one edit each', () => {
  expect(editDistance('snapshot', 'snapshots')).toBe(1)
  expect(editDistance('restroe', 'restore')).toBe(1)
  expect(editDistance('gx', 'gc')).toBe(1)
  expect(editDistance('', 'log')).toBe(3)
  expect(editDistance('jobs', 'jobs')).toBe(0)
})

it('suggests a command one edit per three letters away, or one the word starts; nothing for a word far from all', () => {
  expect(nearest('snapshot', names)).toBe('snapshots')
  expect(nearest('snap', names)).toBe('snapshots')
  expect(nearest('POSITIONS', names)).toBe('positions')
  expect(nearest('replya', names)).toBe('replay')
  expect(nearest('lgo', names)).toBe('log')
  expect(nearest('gc', names)).toBe('gc')
  for (const word of ['frobnicate', 'toString', 'x', 'sn', 'delete']) expect(nearest(word, names), word).toBeUndefined()
})
