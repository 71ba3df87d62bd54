import { fileURLToPath } from 'node:url'

/**
 * The package's connector entry points by name, from the sources, as
 * tsconfig's paths map them for tsc and tsx: src/ loads a connector that
 * registered nothing yet by its package name (src/util/registry.ts).
 */
export const packageEntries = [
  { find: /^tidemark\/s3$/, replacement: fileURLToPath(new URL('./connectors/s3/index.ts', import.meta.url)) },
  { find: /^tidemark\/kafka$/, replacement: fileURLToPath(new URL('./connectors/kafka/index.ts', import.meta.url)) },
]
