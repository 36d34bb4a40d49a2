"""The settings vocabulary that `pacs-rl train`, `eval`, `compare` and the verl plug-in share, one module a job:

    declarations.py   a setting declared once (`setting`: type, default, help, check), the check builders
                      (`interval`, `at_least`, `one_of`, `typed`, `rule`), and the settings generated from a loss
                      option's declaration (`option_setting`, `option_class`)
    data.py           the data and prompt settings of every command (`DataSettings`)
    aliases.py        every other spelling of a setting or an option, in one table (`ALIASES`)
    reading.py        a value's one pass: read from a file (`read_yaml`, its paths against its folder) or from
                      ``--set`` text, renamed, its name checked and its value typed (`read_values`, `coerce`)
    errors.py         `SettingsError`, the one-line refusal of a setting, an option or a path

None of them loads torch or TRL: a mistake is answered before they load.

One name per idea across the commands:

    the output folder                   --output-dir, -o    (setting key output_dir)
    the model                           --model, -m         ("tiny": a tiny random model, built in code)
    the training problems               --dataset, -d       (train; compare's train.dataset)
    the problems scored with pass@k     --benchmarks, -b    (eval, compare; train's held-out set is
                                                             eval_dataset, TRL's name for it)
    optimizer steps                     --max-steps         (TRL's max_steps)
    the random seed                     --seed              (compare: one run per seed, --seed 0,1,2)
    samples per problem                 --n                 (32, math500=32,aime24=512, or paper)
    bad data rows                       --skip-bad-rows / --no-skip-bad-rows
    a settings file                     --config, -c

Older spellings still work and print a one-line note (`aliases.ALIASES`); TRL's spellings (``--output_dir``,
``model_name_or_path``, ``dataset_name``, ``use_peft``, ...) work as they are.
"""
