/**
 * tidemark/testing: the conformance suites of Tidemark's interfaces, for
 * your own implementations (docs/testing.md). Each registers its tests on
 * the runner you pass (vitest's or node:test's `test` and `describe`) and
 * asserts with node:assert, so that no test framework is a dependency.
 */
// Its declarations use Node's types (Buffer, streams): an app compiling them
// without @types/node loaded by default (TypeScript 7) gets them from here.
/// <reference types="node" preserve="true" />
export { snapshotStoreSuite } from './snapshot-store-suite.js'
export type { SnapshotStoreSuiteOptions, SnapshotStoreSuiteCapabilities } from './snapshot-store-suite.js'
export { revisionedLogSuite } from './revisioned-log-suite.js'
export type { RevisionedLogSuiteOptions } from './revisioned-log-suite.js'
export { outputSinkSuite } from './output-sink-suite.js'
export type { OutputSinkSuiteOptions, DeliveredRecord } from './output-sink-suite.js'
export type { SuiteRunner } from './runner.js'
