'use strict'

/*
 * The import rules `npm run lint` checks (docs/architecture.md#layers); lib/'s layers are
 * listed in scripts/lib-layers.cjs, which `npm run deps:report` prints as well.
 */
const { LIB_LAYERS, unitPath, anyOf } = require('./scripts/lib-layers.cjs')

const layerRules = LIB_LAYERS.flatMap((layer, index) => layer.map((unit) => {
  const sameOrAbove = LIB_LAYERS.slice(index).flat().filter((other) => other !== unit)
  return {
    name: 'lib-layers',
    severity: 'error',
    // One rule per unit, all named alike: the report names the rule, and the comment is shared.
    comment: 'a unit of lib/ imports only units of the layers below its own (scripts/lib-layers.cjs)',
    from: { path: unitPath(unit) },
    to: { path: anyOf(sameOrAbove) }
  }
})).filter((rule) => rule.to.path !== '')

const APP = '^(app|server)\\.ts$'

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'no import cycle anywhere',
      from: {},
      to: { circular: true }
    },
    {
      name: 'not-to-unresolvable',
      severity: 'error',
      comment: 'every import resolves: an import the resolver cannot follow (a `.js` specifier without its `.ts` file) would escape every other rule',
      from: {},
      to: { couldNotResolve: true }
    },
    {
      name: 'schemas-import-nothing-of-the-service',
      severity: 'error',
      comment: 'schemas/ is the bottom layer: TypeBox schemas and patterns only',
      from: { path: '^schemas/' },
      to: { path: `^(lib|plugins|routes|cli|bench|test|scripts)/|${APP}` }
    },
    {
      name: 'lib-below-the-app',
      severity: 'error',
      comment: 'lib/ is the domain: it never imports the Fastify layers, the programs, tests or benchmarks',
      from: { path: '^lib/' },
      to: { path: `^(plugins|routes|cli|bench|test|scripts)/|${APP}` }
    },
    {
      name: 'plugins-and-routes-below-the-app',
      severity: 'error',
      comment: 'plugins/ and routes/ are assembled by app.ts; they never import it, server.ts or the programs',
      from: { path: '^(plugins|routes)/' },
      to: { path: `^(cli|bench|test|scripts)/|${APP}` }
    },
    {
      name: 'plugins-below-routes',
      severity: 'error',
      comment: 'routes use the plugins (their decorators), never the other way round',
      from: { path: '^plugins/' },
      to: { path: '^routes/' }
    },
    {
      name: 'app-below-server-and-cli',
      severity: 'error',
      comment: 'app.ts is the service as a plugin: the process (server.ts) and the programs (cli/) sit above it',
      from: { path: '^app\\.ts$' },
      to: { path: '^(server\\.ts$|cli/)' }
    },
    {
      name: 'no-test-or-bench-in-production',
      severity: 'error',
      comment: 'production code never imports tests or benchmarks',
      from: { path: `^(lib|plugins|routes|schemas|cli)/|${APP}` },
      to: { path: '^(test|bench)/' }
    },
    ...layerRules,
    {
      name: 'lib-unplaced',
      severity: 'error',
      comment: 'every module of lib/ belongs to a unit of LIB_LAYERS in scripts/lib-layers.cjs: place a new folder there',
      from: { path: '^lib/', pathNot: anyOf(LIB_LAYERS.flat()) },
      to: {}
    },
    {
      name: 'lib-unplaced',
      severity: 'error',
      comment: 'every module of lib/ belongs to a unit of LIB_LAYERS in scripts/lib-layers.cjs: place a new folder there',
      from: {},
      to: { path: '^lib/', pathNot: anyOf(LIB_LAYERS.flat()) }
    },
    {
      name: 'redis-key-names-in-the-redis-adapter',
      severity: 'error',
      comment: 'every Redis key name is built inside the Redis adapter (lib/state/redis/keys.ts); everything else names state by identifiers (tenant, mode, requestId, bucket…)',
      from: { pathNot: '^lib/state/redis/' },
      to: { path: '^lib/state/redis/keys\\.ts$' }
    },
    {
      name: 'stores-chosen-in-state',
      severity: 'error',
      comment: 'the service uses the ports (lib/state/*.ts) and the factory (lib/state/index.ts); only lib/state/ picks an adapter',
      from: { pathNot: '^lib/state/|^(test|bench)/' },
      to: { path: '^lib/state/(memory|redis)/' }
    },
    {
      name: 'ioredis-in-the-redis-adapter',
      severity: 'error',
      comment: 'Redis is spoken in lib/state/redis/ only: its clients, commands and scripts (the tests and benchmarks start and inspect Redis of their own)',
      from: { pathNot: '^lib/state/redis/|^(test|bench)/' },
      to: { path: '(^|/)node_modules/ioredis/' }
    }
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    reporterOptions: {
      text: { highlightFocused: true }
    }
  }
}
