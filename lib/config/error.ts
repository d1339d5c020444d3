/** A configuration problem, reported as one line naming the variable. */
export class ConfigError extends Error {
  readonly variable: string
  constructor (variable: string, problem: string) {
    super(`Invalid configuration: ${variable} ${problem}`)
    this.name = 'ConfigError'
    this.variable = variable
  }
}
