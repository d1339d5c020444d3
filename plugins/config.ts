import fp from 'fastify-plugin'
import { parseConfig, type Config } from '../lib/config.js'

declare module 'fastify' {
  interface FastifyInstance {
    config: Config
  }
}

/** The one place that reads the process environment. */
export function readConfig (): Config {
  return parseConfig(process.env)
}

export default fp<{ config: Config }>(async function configPlugin (fastify, options) {
  fastify.decorate('config', options.config)
}, { name: 'config', fastify: '5.x' })
