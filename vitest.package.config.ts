import { defineConfig } from 'vitest/config'

// `npm run test:package`: packs the package, installs the tarball into a
// fresh app (`npm init -y`, `npm pkg set type=module`) and runs the README's
// examples there, compiled and under Node's type stripping, and the
// `tidemark` command (test/package/pack.package.ts), and compiles the
// package's declarations under TypeScript x @types/node versions
// (test/package/types.package.ts). CI runs it on every Node.js line engines
// names (.ci/run).
// Not part of `npm test`: the build and the installs take a minute or more.
// Needs no services.
export default defineConfig({
  test: {
    include: ['test/package/**/*.package.ts'],
    // Packs once for every file (test/setup/package.ts).
    globalSetup: ['test/setup/package.ts'],
    setupFiles: ['test/setup/worker.ts'],
    pool: 'forks',
    testTimeout: 120_000,
    hookTimeout: 600_000,
    teardownTimeout: 30_000,
    retry: 0,
  },
})
